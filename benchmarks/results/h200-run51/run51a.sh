#!/usr/bin/env bash
# Run 51a (torch 2.11): captured graphs' small memset nodes rewritten as kernel nodes
# (options memsets="kernels"; runtime/cudagraphs/memsets.py), run 50's prototype wired into
# every capture. The ATen CUDA suites with it (FXSLOTS_MEMSETS=kernels), then llama-small
# paired: memsets as kernels against memset nodes (the default), with no offload and with
# offload="auto" (issue 10's target).
source benchmarks/gpu_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r51a-gpu.txt"
t0=$(date +%s)
FXSLOTS_MEMSETS=kernels FXSLOTS_FAILURES_FILE="$OUT/r51a-failures.txt" timeout 270 python3 -m pytest -q -m cuda \
  -p no:cacheprovider -o log_level=WARNING --timeout 120 -rfE --tb=short \
  tests/test_cuda_memsets.py tests/test_cuda.py tests/test_cuda_reliability.py tests/test_borrow.py \
  tests/test_overlay.py tests/test_deliver.py tests/test_offload.py tests/test_attention.py \
  tests/test_fence.py 2>&1 | grep -v "torch.__trace" > "$OUT/r51a-tests.txt"
grep -E "passed|failed|^FAILED|^ERROR" "$OUT/r51a-tests.txt" | tail -20
timeout 90 python3 tools/mutation/run.py --suite cuda --no-baseline \
  --only memset-kernel-stores-one-byte 2>&1 | tail -3 | tee "$OUT/r51a-mutant.txt"
echo "t=$(( $(date +%s) - t0 ))"
left=$(( 580 - $(date +%s) + t0 ))
timeout $left python3 benchmarks/paired.py llama-small sequential \
  fxslots+memsets=kernels,fxslots+offload=auto,fxslots+offload=auto+memsets=kernels,fxslots+offload=auto:0.8+memsets=kernels,fxslots \
  --reps 9 --steps 8 --seconds $(( left - 20 )) --out "$OUT/r51a-small.json" 2>&1 | grep -v "captured a CUDA graph" \
  | tee "$OUT/r51a-small.txt" | tail -12
echo "t=$(( $(date +%s) - t0 ))"
