#!/usr/bin/env bash
# Run 51d (torch 2.11): memsets="kernels" as the default (no FXSLOTS_MEMSETS), each kept graph
# emptied once instantiated (memsets.release): the memsets suite under ATen and Inductor kernels (its bitwise test now pins ATen kernels: under
# Inductor its loss is a Triton reduction with no memset, run 51c), test_cuda and test_offload;
# then kept_graphs.py with each mode in a process of its own (51c's in-process order hid them).
source benchmarks/gpu_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r51d-gpu.txt"
t0=$(date +%s)
export FXSLOTS_FAILURES_FILE="$OUT/r51d-failures.txt"
cuda_tests r51d-aten 60 tests/test_cuda_memsets.py
FXSLOTS_KERNELS=inductor cuda_tests r51d-inductor 60 tests/test_cuda_memsets.py
timeout 45 python3 benchmarks/results/h200-run51/kept_graphs.py 2>&1 | tee "$OUT/r51d-kept.txt"
echo "t=$(( $(date +%s) - t0 ))"
cuda_tests r51d 100 tests/test_cuda.py tests/test_offload.py
echo "t=$(( $(date +%s) - t0 ))"
