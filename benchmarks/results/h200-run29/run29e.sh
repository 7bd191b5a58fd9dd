#!/usr/bin/env bash
# H200 run 29e: llama-large's peak with the warm-up backward delivering its gradients into their
# buffer (its gradients are ~1 GiB: the copy after the backward held them twice), sequential and
# accum against eager; then llama-small auto against none, paired, on the window-mended planner.
source benchmarks/gpu_setup.sh
timeout 230 python3 benchmarks/bench.py --parts speed --models llama-large --schedules sequential,accum \
  --cases eager,fxslots --quick --budget-s 210 --out "$OUT/bench-r29e" 2>&1 \
  | grep -v "captured a CUDA graph" | tee "$OUT/r29e-llama-large.txt" | grep "^| " | head -8
timeout 200 python3 benchmarks/paired.py llama-small sequential fxslots,fxslots+offload=auto --reps 11 \
  --out "$OUT/r29e-auto.json" 2>&1 | grep -v "captured a CUDA graph" | grep "|\|link" | tee "$OUT/r29e-auto.txt"
