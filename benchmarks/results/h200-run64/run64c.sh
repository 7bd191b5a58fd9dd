#!/usr/bin/env bash
# Run 64c (session 44): the compiled-autograd change (a slot whose views outlived their autograd
# graph is disowned; every forward now records its autograd node) under real CUDA graphs: the
# new test, then the files that exercise the ring and variants most.
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r64c-gpu.txt"
t0=$(date +%s)
cuda_tests r64c 200 tests/test_cuda.py tests/test_cuda_reliability.py tests/test_cuda_inference.py
echo "t=$(( $(date +%s) - t0 ))"
