#!/usr/bin/env bash
# Run 51a (torch 2.11): captured graphs' small memset nodes rewritten as kernel nodes
# (options memsets="kernels"; runtime/cudagraphs/memsets.py), run 50's prototype wired into
# every capture. Session 33 had device time for little more than one call, so this one does
# the most telling parts first: the memsets suite under ATen and Inductor kernels; llama-small
# paired, memsets as kernels against memset nodes, with no offload and with offload="auto"
# (issue 10's target); then the ATen CUDA suites with FXSLOTS_MEMSETS=kernels in the time left,
# and the cuda mutant.
source benchmarks/gpu_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r51a-gpu.txt"
t0=$(date +%s)
export FXSLOTS_FAILURES_FILE="$OUT/r51a-failures.txt"
FXSLOTS_MEMSETS=kernels cuda_tests r51a-aten 70 tests/test_cuda_memsets.py
FXSLOTS_KERNELS=inductor FXSLOTS_MEMSETS=kernels cuda_tests r51a-inductor 80 tests/test_cuda_memsets.py
echo "t=$(( $(date +%s) - t0 ))"
timeout 260 python3 benchmarks/paired.py llama-small sequential \
  fxslots+memsets=kernels,fxslots+offload=auto,fxslots+offload=auto+memsets=kernels,fxslots \
  --reps 11 --steps 8 --seconds 240 --out "$OUT/r51a-small.json" 2>&1 \
  | grep -v "captured a CUDA graph" | tee "$OUT/r51a-small.txt" | tail -10
echo "t=$(( $(date +%s) - t0 ))"
FXSLOTS_MEMSETS=kernels timeout $(( 520 - $(date +%s) + t0 )) python3 -m pytest -q -m cuda \
  -p no:cacheprovider -o log_level=WARNING --timeout 120 -rfE --tb=short \
  tests/test_cuda.py tests/test_offload.py tests/test_cuda_reliability.py tests/test_attention.py \
  tests/test_fence.py tests/test_deliver.py tests/test_overlay.py tests/test_borrow.py 2>&1 \
  | grep -v "torch.__trace" > "$OUT/r51a-tests.txt"
grep -E "passed|failed|^FAILED|^ERROR" "$OUT/r51a-tests.txt" | tail -20
echo "t=$(( $(date +%s) - t0 ))"
timeout $(( 585 - $(date +%s) + t0 )) python3 tools/mutation/run.py --suite cuda --no-baseline \
  --only memset-kernel-stores-one-byte 2>&1 | tail -3 | tee "$OUT/r51a-mutant.txt"
echo "t=$(( $(date +%s) - t0 ))"
