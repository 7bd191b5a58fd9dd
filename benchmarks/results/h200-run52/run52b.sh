#!/usr/bin/env bash
# Run 52b (torch 2.11): run 52a's Inductor pairs again with the two fixes it led to: graphs with
# side-stream copies compile without Inductor's memory-driven reordering (it hoisted each
# offload join to its copy's start), and the cost model charges Inductor's fused kernels, not
# each ATen node. Then test_inductor's CUDA tests.
source benchmarks/gpu_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r52b-gpu.txt"
t0=$(date +%s)
timeout 115 python3 benchmarks/paired.py llama-small sequential \
  fxslots+kernels=inductor+offload=auto,fxslots+kernels=inductor \
  --reps 11 --steps 8 --seconds 100 --out "$OUT/r52b-small.json" 2>&1 \
  | grep -v "captured a CUDA graph" | tee "$OUT/r52b-small.txt" | tail -8
echo "t=$(( $(date +%s) - t0 ))"
timeout 85 python3 benchmarks/paired.py heavy sequential \
  fxslots+kernels=inductor+offload=auto,fxslots+kernels=inductor \
  --reps 11 --steps 8 --seconds 65 --out "$OUT/r52b-heavy.json" 2>&1 \
  | grep -v "captured a CUDA graph" | tee "$OUT/r52b-heavy.txt" | tail -8
echo "t=$(( $(date +%s) - t0 ))"
left=$(( 240 - $(date +%s) + t0 ))
[ "$left" -gt 20 ] && cuda_tests r52b $left tests/test_inductor.py
echo "t=$(( $(date +%s) - t0 ))"
