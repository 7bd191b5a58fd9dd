#!/usr/bin/env bash
# Run 51e (torch 2.11): 51d cut to what session 33's last device time could hold: the memsets
# suite with memsets="kernels" as the default and each kept graph emptied once instantiated
# (memsets.release), under ATen and Inductor kernels; kept_graphs.py, each mode in a process
# of its own.
source benchmarks/gpu_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r51e-gpu.txt"
t0=$(date +%s)
export FXSLOTS_FAILURES_FILE="$OUT/r51e-failures.txt"
cuda_tests r51e-aten 50 tests/test_cuda_memsets.py
FXSLOTS_KERNELS=inductor cuda_tests r51e-inductor 50 tests/test_cuda_memsets.py
echo "t=$(( $(date +%s) - t0 ))"
timeout 40 python3 benchmarks/results/h200-run51/kept_graphs.py 2>&1 | tee "$OUT/r51e-kept.txt"
echo "t=$(( $(date +%s) - t0 ))"
