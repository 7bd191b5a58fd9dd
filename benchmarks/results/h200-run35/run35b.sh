#!/usr/bin/env bash
# H200 run 35b (torch 2.11): fused_check.py again, a new microbatch each step (35a used one
# batch for every step, whose sums round alike fused or not); held_output.py on heavy (seq
# 2048): the held loop's backward now stages its tangents in the slot's other output buffer,
# no staging buffer (run 34a: held reserved 2.566 GiB against dropped 2.504).
source benchmarks/gpu_setup.sh
timeout 150 python3 benchmarks/results/h200-run35/fused_check.py 2>&1 \
  | grep -v "captured a CUDA graph\|^W1\|torch.__trace" | tail -14 | tee "$OUT/r35b-fused-check.txt"
timeout 330 python3 benchmarks/held_output.py --model heavy --seq 2048 --reps 7 --steps 12 \
  --out "$OUT" 2>&1 | grep -v "^W1\|torch.__trace" | tail -9 | tee "$OUT/r35b-held-output.txt"
