#!/usr/bin/env bash
# H200 run 35e (torch 2.11): heavy's in-flight and accumulating schedules (the quick preset of
# 35d runs heavy sequential only): eager / reduce-overhead / fxslots / fused, 5 reps x 8 steps.
source benchmarks/gpu_setup.sh
timeout 420 python3 benchmarks/bench.py --parts speed --models heavy \
  --schedules accum,1f1b,ffffbbbb --cases eager,reduce-overhead,fxslots --reps 5 --steps 8 \
  --fxslots-variants '[{"grad_accumulation": "fused"}]' --budget-s 380 --out "$OUT/bench-r35e" 2>&1 \
  | grep -v "captured a CUDA graph\|^W1\|torch.__trace" | grep "^heavy\|^speed" | tee "$OUT/r35e-bench.txt"
