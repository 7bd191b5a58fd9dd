#!/usr/bin/env bash
# Run 51d (torch 2.11): run 51e (memsets="kernels" as the default, each kept graph emptied once
# instantiated: the memsets suite under ATen and Inductor kernels, kept_graphs.py per process),
# then test_cuda and test_offload with the same defaults.
bash benchmarks/results/h200-run51/run51e.sh
source benchmarks/gpu_setup.sh
t0=$(date +%s)
FXSLOTS_FAILURES_FILE="$OUT/r51d-failures.txt" cuda_tests r51d 100 tests/test_cuda.py \
  tests/test_offload.py
echo "t=$(( $(date +%s) - t0 ))"
