#!/usr/bin/env bash
# Run 52c (torch 2.11): what the session's last device time could hold (about 215 s):
# the Inductor auto/none pairs of run 52a with both fixes (no memory-driven reordering of
# graphs with side-stream copies; the cost model charges Inductor's fused kernels).
source benchmarks/gpu_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r52c-gpu.txt"
t0=$(date +%s)
timeout 160 python3 benchmarks/paired.py llama-small sequential \
  fxslots+kernels=inductor+offload=auto,fxslots+kernels=inductor \
  --reps 9 --steps 8 --seconds 145 --out "$OUT/r52c-small.json" 2>&1 \
  | grep -v "captured a CUDA graph" | tee "$OUT/r52c-small.txt" | tail -8
echo "t=$(( $(date +%s) - t0 ))"
left=$(( 215 - $(date +%s) + t0 ))
[ "$left" -gt 40 ] && timeout $left python3 benchmarks/paired.py heavy sequential \
  fxslots+kernels=inductor+offload=auto,fxslots+kernels=inductor \
  --reps 9 --steps 8 --seconds $(( left - 10 )) --out "$OUT/r52c-heavy.json" 2>&1 \
  | grep -v "captured a CUDA graph" | tee "$OUT/r52c-heavy.txt" | tail -8
echo "t=$(( $(date +%s) - t0 ))"
