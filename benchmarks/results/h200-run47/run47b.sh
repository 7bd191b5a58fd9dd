#!/usr/bin/env bash
# Run 47b (torch 2.11): issue 13's compute-bound transformer, kernels="inductor" paired against
# torch.compile default (runs 44 and 46 ran on H100s; this asks for the H200 figure again).
source benchmarks/gpu_setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/r47b-gpu.txt"
timeout 560 python3 benchmarks/paired.py llama-large sequential \
  fxslots+kernels=inductor,fxslots+kernels=inductor+grads_in_arena=false,inductor \
  --reps 7 --steps 8 --out "$OUT/r47b-large.json" 2>&1 | grep -v "captured a CUDA graph" \
  | tee "$OUT/r47b-large.txt" | tail -8
