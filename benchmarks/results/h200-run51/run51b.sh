#!/usr/bin/env bash
# Run 51b (torch 2.11): issue 13's llama-large, kernels="inductor", paired against
# torch.compile default, with captured memset nodes made kernels (memsets="kernels") and kept
# (the default, as in run 47b); then the host memory of a kept cudaGraph_t.
source benchmarks/gpu_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r51b-gpu.txt"
timeout 540 python3 benchmarks/paired.py llama-large sequential \
  fxslots+kernels=inductor+memsets=kernels,fxslots+kernels=inductor,inductor \
  --reps 7 --steps 8 --out "$OUT/r51b-large.json" 2>&1 | grep -v "captured a CUDA graph" \
  | tee "$OUT/r51b-large.txt" | tail -8
timeout 40 python3 benchmarks/results/h200-run51/kept_graphs.py 2>&1 | tee "$OUT/r51b-kept.txt"
