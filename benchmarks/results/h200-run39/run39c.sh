#!/usr/bin/env bash
# H200 run 39c: issue 10's "auto" target (step at most 1.03x offload="none"), paired in one
# process (run 30 read llama-small 1.05x from separate processes, heavy 1.00x).
source benchmarks/gpu_setup.sh
for m in llama-small heavy; do
  timeout 270 python3 benchmarks/paired.py "$m" sequential fxslots+offload=auto,fxslots \
    --reps 21 --steps 8 --out "$OUT/r39c-paired-auto-$m.json" 2>&1 | tail -5 \
    | tee "$OUT/r39c-paired-auto-$m.txt"
done
