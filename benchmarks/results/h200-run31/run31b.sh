#!/usr/bin/env bash
# H200 run 31b: the offload part (footprint: reserved against eager's) on 31a's code; the fixed
# CUDA test of test_deliver_forward; heavy sequential and 1F1B speed (forward outputs delivered).
source benchmarks/gpu_setup.sh
timeout 250 python3 benchmarks/bench.py --parts offload --quick --models heavy,llama-small --budget-s 230 --out "$OUT/bench-r31b" \
  2>&1 | grep -v "captured a CUDA graph" | tee "$OUT/r31b-offload.txt" | grep "^| " | head -20
cuda_tests r31b 120 tests/test_deliver_forward.py
timeout 170 python3 benchmarks/bench.py --parts speed --models heavy --schedules sequential,1f1b \
  --cases eager,reduce-overhead,fxslots --quick --budget-s 160 --out "$OUT/bench-r31b-speed" 2>&1 \
  | grep -v "captured a CUDA graph" | tee "$OUT/r31b-speed.txt" | grep "^| " | head -10
