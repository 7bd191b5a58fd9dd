#!/usr/bin/env bash
# Run 53b (torch 2.11): the CUDA suites the session-34 fixes touch (the cost model under
# Inductor, Inductor's order kept for graphs with side-stream copies), with what device time is
# left after run 53.
source benchmarks/gpu_setup.sh
t0=$(date +%s)
FXSLOTS_FAILURES_FILE="$OUT/r53b-failures.txt" cuda_tests r53b 150 tests/test_offload.py \
  tests/test_cuda.py tests/test_cuda_reliability.py
echo "t=$(( $(date +%s) - t0 ))"
