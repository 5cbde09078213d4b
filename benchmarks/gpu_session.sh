#!/bin/bash
# A lent GPU machine's checks, prepared here and run there in one device call (the machines reach no package index).
#
#   bash benchmarks/gpu_session.sh prepare        # here: .whl/ (wheels the machine's image lacks) and .gpu/ (the
#                                                 # embedded model's tokenizer, its weights left out, and the ARC data)
#   bash benchmarks/gpu_session.sh run            # there, carrying .whl and .gpu (timeout_s 600); the steps below
#   bash benchmarks/gpu_session.sh small [DIR]    # here, on the CPU: the same steps on tiny models, results in DIR
#                                                 # (default: a new temporary folder), never in benchmarks/results
#
# The steps, in order of value, each under its own limit (SIGINT: a stopped step writes what it measured) and all
# within TOTAL seconds (450) from the script's start, pip included; each step's JSON is copied to $OUT/res as it ends:
#   1. decode (TDEC 240 s): the 7B shape's original, cut, int8 and int4, eager then compiled (regional compile; CUDA
#      graphs), batch 1, against the bandwidth floor: results/gpu_decode_<card>.json
#   2. 2:4 kernels (T24 45 s; CUDA only): results/two_four_kernels.json
#   3. the rest of gpu_check.py (TFULL 150 s): analyses, cuts, generation, speed, memory, ARC/cloze, width, int8/int4,
#      encoders: results/gpu/<date>-<time>-<card>.json
# A limit of 0 skips its step; DECODE_ARGS adds options to the decode run (--eager_only).
set -u
cd "$(dirname "$0")/.." || exit 1
TOTAL=${TOTAL:-450}

limited() {  # limited SECONDS LOG COMMAND…: at most SECONDS and what is left of TOTAL; SIGINT at the limit, SIGKILL 20 s
    local seconds=$1 log=$2; shift 2  # later; then this step's results are copied to $OUT/res
    local left=$((TOTAL - SECONDS - 25))
    [ "$seconds" -gt "$left" ] && seconds=$left
    if [ "$seconds" -le 0 ]; then echo "== $log: skipped (limit 0 or no time left)"; return 0; fi
    local started=$SECONDS
    timeout -s INT -k 20 "$seconds" "$@" 2>&1 | tee "$OUT/$log"
    echo "== $log: $((SECONDS - started)) s (limit $seconds s)"
    mkdir -p "$OUT/res"
    find "$RESULTS" -path "$OUT/res" -prune -o -name '*.json' -newer "$STARTED" -exec cp {} "$OUT/res/" \;
}

steps() {  # the three steps; $@: the options every gpu_check run takes here
    limited "${TDEC:-240}" decode.log "$PY" -m benchmarks.gpu_check --decode_only "$@" ${DECODE_ARGS:-}
    if [ "$CUDA" = 1 ]; then
        limited "${T24:-45}" two_four.log "$PY" -m benchmarks.two_four_kernels
    else
        echo "== two_four.log: skipped (2:4 kernels need a CUDA GPU)"
    fi
    limited "${TFULL:-150}" full.log "$PY" -m benchmarks.gpu_check --skip_decode "$@"
    ls -la "$OUT/res"
}

case "${1:-}" in
prepare)
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
    grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo /.gpu/ >> .git/info/exclude
    # The image has torch, transformers 5.17 and most of the rest (.library/device/KINDS.md); these it lacks or
    # holds in another version, each at the version installed here
    mkdir -p .whl
    for name in transformers lm-eval torchao datasets dill multiprocess more-itertools pytz chardet brotli defusedxml \
        httpx2 httpcore2 truststore; do
        pin="$name==$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('$name'))")" || exit 1
        python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            -d .whl "$pin" 2>/dev/null || { echo "could not download $pin"; exit 1; }
    done
    model=$(.venv/bin/python -c "from prune.core.loading import default_checkpoint; print(default_checkpoint())") || exit 1
    folder=.gpu/cache/models/$(basename "$model")
    mkdir -p "$folder" .gpu/benchdata
    find "$model" -maxdepth 1 -type f ! -name '*.safetensors' -exec cp {} "$folder/" \;
    # a converted folder names the GGUF it came from; none travels, and the check exports none: a file that is there
    echo "{\"gguf\": \"$folder/config.json\"}" > "$folder/layercut-gguf.json"  # read from the root
    data=$(.venv/bin/python -c "from prune.core.paths import default_data_dir; print(default_data_dir())") || exit 1
    cp -r "$data"/arc "$data"/MANIFEST.tsv "$data"/README.md .gpu/benchdata/
    du -sh .whl .gpu
    ;;
run)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 3
    export PYTHONPATH=/tmp/site:. LAYERCUT_CACHE=$PWD/.gpu/cache PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    PY=python3 CUDA=1 RESULTS=${LAYERCUT_RESULTS_DIR:-benchmarks/results} STARTED=$(mktemp)
    steps --questions 50 --data_dir .gpu/benchdata
    ;;
small)
    OUT=${2:-$(mktemp -d -t layercut-gpu-session-XXXXXX)}
    mkdir -p "$OUT" || exit 1
    OUT=$(cd "$OUT" && pwd)
    export LAYERCUT_RESULTS_DIR=$OUT PYTHONPATH=. PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
    PY=python3; [ -x .venv/bin/python ] && PY=.venv/bin/python
    CUDA=0 RESULTS=$OUT STARTED=$(mktemp)
    steps --small --device cpu --questions 5
    echo "results in $OUT"
    ;;
*)
    sed -n '2,20p' "$0"; exit 2 ;;
esac
