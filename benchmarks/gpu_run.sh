#!/usr/bin/env bash
# One call on the GPU machine: install, GPU tests, then the benchmark. Results land in $OUT.
# Usage: [BENCH_ARGS=...] bash benchmarks/gpu_run.sh [MODELS] [TEST_TIMEOUT_S] [BENCH_TIMEOUT_S]
# Carry .whl (expecttest) with the call; see docs/design.md for what each file checks.
source "$(dirname "$0")/gpu_setup.sh"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# Each file on its own, with a per-test limit, so one slow file cannot hide the others' results;
# junit XML keeps every test's outcome and message.
for f in tests/test_cuda.py tests/test_cuda_reliability.py tests/test_inductor.py tests/test_deliver.py; do
  name=$(basename "$f" .py)
  FXSLOTS_FAILURES_FILE="$OUT/$name.failures" timeout "${2:-240}" python3 -m pytest -q -m cuda "$f" -p no:cacheprovider -o log_level=WARNING \
    --timeout 120 -rfE --tb=short --junitxml "$OUT/$name.xml" 2>&1 \
    | grep -v "torch.__trace" > "$OUT/$name.txt"
  grep -E "passed|failed|^FAILED|^ERROR" "$OUT/$name.txt" | tail -30
done
# The benchmark (benchmarks/bench.py): BENCH_ARGS picks parts and models (default: the speed part
# on MODELS); its budget ends it 20 s before this call's limit, keeping every finished case.
BENCH_ARGS=${BENCH_ARGS:-"--parts speed --models ${1:-launch-bound}"}
B=${3:-330}
[ "$B" = 0 ] || timeout "$B" python3 benchmarks/bench.py $BENCH_ARGS --budget-s $((B - 20)) \
  --out "$OUT/bench" --png "$OUT/bench/speed.png" 2>&1 | tee "$OUT/bench.txt" | tail -60
