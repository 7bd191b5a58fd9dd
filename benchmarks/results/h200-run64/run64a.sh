#!/usr/bin/env bash
# Run 64a (session 44): on an H200, issue 13's llama-large table (run63a.sh). On any other card,
# every CUDA test file on today's code instead, each with a limit, until CALL_S (default 570)
# runs out; a later call (FILES=...) takes the files this one did not reach. R names the output
# prefix (default r64a), so a later session reruns this script under its own run number.
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/${R:-r64a}-gpu.txt")
echo "$gpu"
if grep -q H200 <<< "$gpu"; then exec bash benchmarks/results/h200-run63/run63a.sh; fi
t0=$(date +%s); call_s=${CALL_S:-570}
FILES=${FILES:-"test_cuda test_cuda_reliability test_cuda_checkpointed_rng test_attention
  test_borrow test_cuda_inference test_share test_inductor test_cuda_memsets
  test_deliver_forward test_overlay test_fence test_deliver test_zoo"}
for name in $FILES; do
  left=$(( call_s - ($(date +%s) - t0) ))
  [ "$left" -gt 40 ] || { echo "not reached: $name"; continue; }
  echo "== $name (${left}s left)"
  cuda_tests "${R:-r64a}" "$left" "tests/$name.py"
done
echo "t=$(( $(date +%s) - t0 ))"
