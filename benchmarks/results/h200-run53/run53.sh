#!/usr/bin/env bash
# Run 53 (torch 2.11), one call of at most 600 s: run 52b (run 52a's Inductor auto/none pairs
# with session 34's two fixes, then test_inductor's CUDA tests), then the ATen auto/none pair on
# llama-small with what is left (issue 10's auto target). Eight files come back.
t0=$(date +%s)
bash benchmarks/results/h200-run52/run52b.sh
source benchmarks/gpu_setup.sh
left=$(( 585 - $(date +%s) + t0 ))
echo "aten pair: ${left} s left"
[ "$left" -gt 60 ] && timeout $left python3 benchmarks/paired.py llama-small sequential \
  fxslots+offload=auto,fxslots \
  --reps 9 --steps 8 --seconds $(( left - 15 )) --out "$OUT/r53-aten.json" 2>&1 \
  | grep -v "captured a CUDA graph" | tee "$OUT/r53-aten.txt" | tail -8
echo "t=$(( $(date +%s) - t0 ))"
