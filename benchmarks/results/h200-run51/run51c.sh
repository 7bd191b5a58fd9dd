#!/usr/bin/env bash
# Run 51c (torch 2.11): the CUDA suites under kernels="inductor" with memsets="kernels"
# (Inductor's captured graphs: cuDNN attention's memsets remain, its own reductions have none),
# each file with a limit of its own (run 45: test_inductor alone took 169 s), within one call.
source benchmarks/gpu_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r51c-gpu.txt"
t0=$(date +%s)
export FXSLOTS_KERNELS=inductor FXSLOTS_MEMSETS=kernels FXSLOTS_FAILURES_FILE="$OUT/r51c-failures.txt"
cuda_tests r51c 90 tests/test_cuda_memsets.py tests/test_fence.py tests/test_deliver.py \
  tests/test_overlay.py
echo "t=$(( $(date +%s) - t0 ))"
cuda_tests r51c $(( 570 - $(date +%s) + t0 )) tests/test_inductor.py
echo "t=$(( $(date +%s) - t0 ))"
