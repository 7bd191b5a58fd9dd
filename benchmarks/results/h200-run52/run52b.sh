#!/usr/bin/env bash
# Run 52b (torch 2.11): run 52c (run 52a's Inductor auto/none pairs with both fixes: no
# memory-driven reordering of graphs with side-stream copies; the cost model charges
# Inductor's fused kernels), then test_inductor's CUDA tests.
bash benchmarks/results/h200-run52/run52c.sh
source benchmarks/gpu_setup.sh
t0=$(date +%s)
cuda_tests r52b 240 tests/test_inductor.py
echo "t=$(( $(date +%s) - t0 ))"
