#!/usr/bin/env bash
# H200 run 29c: where the warm-up's peak comes from. llama-small offload="none" peaked at
# 0.84 GiB in its warm-up (steady 0.44; eager 0.57) since run 24 (run 23: 0.68).
source benchmarks/gpu_setup.sh
for m in llama-small heavy; do
  s=$([ $m = heavy ] && echo 2048 || echo 512)
  for b in fxslots eager; do
    timeout 120 python3 benchmarks/footprint.py --model $m --schedule sequential --backend $b \
      --options '{"slots": 1}' --steps 3 --seq $s --out "$OUT/footprint" 2>&1 \
      | grep -v "captured a CUDA graph" | tee "$OUT/r29c-$m-$b.txt" | tail -22
  done
done
