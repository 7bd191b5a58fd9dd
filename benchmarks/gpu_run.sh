#!/usr/bin/env bash
# One call on the GPU machine: install, GPU tests, then the benchmark. Results land in $OUT.
# Usage: bash benchmarks/gpu_run.sh [MODELS] [TEST_TIMEOUT_S] [BENCH_TIMEOUT_S]
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
timeout "${2:-240}" python3 -m pytest -q -m cuda tests/ -p no:cacheprovider -o log_level=WARNING 2>&1 | tee "$OUT/gpu_tests.txt" | tail -40
timeout "${3:-330}" python3 benchmarks/bench.py --models "${1:-launch-bound}" \
  --out "$OUT/bench.json" 2>&1 | tee "$OUT/bench.txt" | tail -30
