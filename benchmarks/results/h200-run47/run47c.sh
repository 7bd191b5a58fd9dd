#!/usr/bin/env bash
# Run 47c (torch 2.11): 47a's llama-small sweep again, with paired.py's forward timed at the
# largest variant (sequence 512) only: 47a took the median over both variants' forwards, so its
# "x link capacity" compared seq-512 bytes with a forward of mixed shapes.
source benchmarks/gpu_setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/r47c-gpu.txt"
timeout 330 python3 benchmarks/paired.py llama-small sequential \
  fxslots+offload=auto,fxslots+offload=auto:0.8,fxslots+offload=auto:0.7,fxslots+offload=auto:0.6,fxslots \
  --reps 11 --steps 8 --out "$OUT/r47c-small.json" 2>&1 | grep -v "captured a CUDA graph" \
  | tee "$OUT/r47c-small.txt" | tail -9
