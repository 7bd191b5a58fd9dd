#!/usr/bin/env bash
# Run 70b (session 50): feeds_cuda.py (tests/test_feeds.py's scenarios under real CUDA graphs),
# then CUDA test files until CALL_S runs out (run67a.sh's loop).
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/${R:-r70b}-gpu.txt"
timeout 200 python benchmarks/results/h200-run70/feeds_cuda.py 2>&1 | grep -v "torch.__trace" \
  | tee "$OUT/${R:-r70b}-feeds.txt" | grep -vE "^\s|Warning|warn" | tail -20
t0=$(date +%s); call_s=${CALL_S:-330}
for name in ${FILES:-test_attention test_inductor test_share test_borrow test_cuda_memsets}; do
  left=$(( call_s - ($(date +%s) - t0) ))
  [ "$left" -gt 40 ] || { echo "not reached: $name"; continue; }
  echo "== $name (${left}s left)"
  cuda_tests ${R:-r70b} "$left" "tests/$name.py"
done
echo "t=$(( $(date +%s) - t0 ))"
