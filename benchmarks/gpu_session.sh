#!/bin/bash
# A lent GPU machine's checks, prepared here and run there (the device tool's machines reach no package index).
#
#   bash benchmarks/gpu_session.sh prepare   # here: .whl/ (wheels the machine's image lacks) and .gpu/ (the embedded
#                                            # model's tokenizer, its weights left out, and the ARC data); both ignored
#   bash benchmarks/gpu_session.sh run       # there, carrying .whl and .gpu: 2:4 kernels, the decode step (eager and
#                                            # compiled), the whole check; each under a time limit (SIGINT: a stopped
#                                            # step keeps what it measured); figures copied to $OUT/res
#
# Limits (seconds), each skipped at 0: T24 (two_four_kernels.py, 70), TDEC (--decode_only, 230), TFULL (the whole
# check with --eager_only, 220); DECODE_ARGS adds options to the decode run (--eager_only).
# On 27 November 2026 an H200 ran these at 16 s, >230 s (the compile did not finish) and 180 s (stopped in the
# encoders): docs/big-models-and-gpus.md#on-a-gpu.
set -u
case "${1:-}" in
prepare)
    cd "$(dirname "$0")/.." || exit 1
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
    limited() {  # limited SECONDS LOG COMMAND…: skipped at 0; SIGINT at the limit, SIGKILL 20 s later
        local seconds=$1 log=$2; shift 2
        [ "$seconds" -gt 0 ] || return 0
        local started=$SECONDS
        timeout -s INT -k 20 "$seconds" "$@" 2>&1 | tee "$OUT/$log"
        echo "== $log: $((SECONDS - started)) s"
    }
    limited "${T24:-70}" two_four.log python3 -m benchmarks.two_four_kernels
    limited "${TDEC:-230}" decode.log python3 -m benchmarks.gpu_check --decode_only ${DECODE_ARGS:-}
    limited "${TFULL:-220}" full.log python3 -m benchmarks.gpu_check --eager_only --questions 50 --data_dir .gpu/benchdata
    mkdir -p "$OUT/res"
    cp benchmarks/results/two_four_kernels.json benchmarks/results/gpu_decode_*.json benchmarks/results/gpu/*.json \
        "$OUT/res/" 2>/dev/null
    ls -la "$OUT/res"
    ;;
*)
    sed -n '2,14p' "$0"; exit 2 ;;
esac
