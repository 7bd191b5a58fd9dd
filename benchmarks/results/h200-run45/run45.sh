#!/usr/bin/env bash
# Run 45 (session 30): the ATen CUDA tests 42c and 42d's limits cut (test_deliver_forward,
# test_inductor), each file in a call of its own time, then test_deliver and test_overlay.
source benchmarks/gpu_setup.sh
t0=$(date +%s)
cuda_tests r45 200 tests/test_deliver_forward.py tests/test_inductor.py
echo "t=$(( $(date +%s) - t0 ))"
timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_deliver.py \
  tests/test_overlay.py -rfE --tb=short -o log_level=WARNING 2>&1 | grep -v "torch.__trace" \
  > "$OUT/r45-deliver-overlay.txt"
grep -E "passed|failed|^FAILED|^E " "$OUT/r45-deliver-overlay.txt" | head -20
echo "t=$(( $(date +%s) - t0 ))"
