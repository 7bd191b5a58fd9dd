#!/usr/bin/env bash
# H200 run 29d: the warm-up backward now computes the gradients autograd may keep into their one
# buffer (delivery.warm_up) instead of copying them there after it. The CUDA suites that run
# every backward's warm-up, run 29c's footprint again, and the offload part (peaks, reserved).
source benchmarks/gpu_setup.sh
cuda_tests r29d 170 tests/test_cuda.py tests/test_deliver.py tests/test_cuda_reliability.py
for m in llama-small heavy; do
  s=$([ $m = heavy ] && echo 2048 || echo 512)
  timeout 100 python3 benchmarks/footprint.py --model $m --schedule sequential --backend fxslots \
    --options '{"slots": 1}' --steps 3 --seq $s --out "$OUT/footprint-r29d" 2>&1 \
    | grep -v "captured a CUDA graph" | tee "$OUT/r29d-$m-fxslots.txt" | tail -12
done
timeout 280 python3 benchmarks/bench.py --parts offload --quick --models heavy,llama-small --budget-s 260 --out "$OUT/bench-r29d" \
  2>&1 | grep -v "captured a CUDA graph" | tee "$OUT/r29d-offload.txt" | grep "^| " | head -20
