#!/usr/bin/env bash
# H200 run 31c: a captured backward reads its tangents where autograd put them while they stay
# put (cudagraphs/tangents.py), beside 31a's delivered forward outputs. The CUDA suites; the
# offload part (footprint against eager's); heavy and llama-small speed, sequential and 1F1B.
source benchmarks/gpu_setup.sh
cuda_tests r31c 150 tests/test_tangents.py tests/test_deliver_forward.py tests/test_deliver.py tests/test_cuda.py tests/test_cuda_reliability.py tests/test_overlay.py tests/test_borrow.py tests/test_prepare.py
timeout 200 python3 benchmarks/bench.py --parts offload --quick --models heavy,llama-small --budget-s 190 --out "$OUT/bench-r31c" \
  2>&1 | grep -v "captured a CUDA graph" | tee "$OUT/r31c-offload.txt" | grep "^| " | head -20
timeout 150 python3 benchmarks/bench.py --parts speed --models heavy,llama-small --schedules sequential,1f1b \
  --cases eager,reduce-overhead,fxslots --quick --budget-s 140 --out "$OUT/bench-r31c-speed" 2>&1 \
  | grep -v "captured a CUDA graph" | tee "$OUT/r31c-speed.txt" | grep "^| " | head -14
