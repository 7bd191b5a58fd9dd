#!/usr/bin/env bash
# H200 run 30a: the backward's temporaries computed into arena bytes it has finished reading
# (passes/borrow.py), and lifetimes that follow aliases by schema (more arena bytes for
# gradients). The CUDA suites that run the delivering backward, then the offload part (peak,
# in use, reserved against eager).
source benchmarks/gpu_setup.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
cuda_tests r30a 150 tests/test_borrow.py tests/test_overlay.py tests/test_deliver.py tests/test_cuda.py tests/test_cuda_reliability.py
timeout 270 python3 benchmarks/bench.py --parts offload --quick --models heavy,llama-small --budget-s 250 --out "$OUT/bench-r30a" \
  2>&1 | grep -v "captured a CUDA graph" | tee "$OUT/r30a-offload.txt" | grep "^| " | head -20
