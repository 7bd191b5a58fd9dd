#!/usr/bin/env bash
# Run 51c (torch 2.11): the CUDA suites under kernels="inductor" with memsets="kernels"
# (Inductor's captured graphs: cuDNN attention's memsets remain, its own reductions have none),
# each file in a call of its own time, as run 45 did.
source benchmarks/gpu_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r51c-gpu.txt"
t0=$(date +%s)
export FXSLOTS_KERNELS=inductor FXSLOTS_MEMSETS=kernels FXSLOTS_FAILURES_FILE="$OUT/r51c-failures.txt"
cuda_tests r51c 200 tests/test_cuda_memsets.py tests/test_fence.py tests/test_deliver.py \
  tests/test_overlay.py tests/test_inductor.py
echo "t=$(( $(date +%s) - t0 ))"
