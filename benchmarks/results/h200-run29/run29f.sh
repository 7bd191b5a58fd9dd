#!/usr/bin/env bash
# H200 run 29f: the warm-up delivers its gradients only where the estimate says that peaks lower
# (overlay.delivering_warm_up_is_lower). llama-large sequential peaked 9.79 GiB delivering (29e;
# 8.87 before); llama-small's footprint workload 0.859 delivering (29d; 0.992 before).
source benchmarks/gpu_setup.sh
timeout 130 python3 benchmarks/bench.py --parts speed --models llama-large --schedules sequential \
  --cases fxslots --quick --budget-s 120 --out "$OUT/bench-r29f" 2>&1 \
  | grep -v "captured a CUDA graph" | tee "$OUT/r29f-llama-large.txt" | grep "^| " | head -3
timeout 60 python3 benchmarks/footprint.py --model llama-small --schedule sequential --backend fxslots \
  --options '{"slots": 1}' --steps 3 --seq 512 --out "$OUT/footprint-r29f" 2>&1 \
  | grep -v "captured a CUDA graph" | tee "$OUT/r29f-llama-small-fxslots.txt" | grep -A6 "at its most"
