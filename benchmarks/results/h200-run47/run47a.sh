#!/usr/bin/env bash
# Run 47a (torch 2.11): offload="auto:<share>" swept against no offload, paired in one process
# per model (issue 10's auto target: at most 1.03x none, moving at least 80% of the bytes the
# link carries in the measured forward). paired.py now times the forward alone (CUDA events)
# and prints each backend's bytes over the link's capacity in the base's forward.
source benchmarks/gpu_setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/r47a-gpu.txt"
timeout 330 python3 benchmarks/paired.py llama-small sequential \
  fxslots+offload=auto,fxslots+offload=auto:0.9,fxslots+offload=auto:0.8,fxslots+offload=auto:0.7,fxslots+offload=auto:0.6,fxslots \
  --reps 11 --steps 8 --out "$OUT/r47a-small.json" 2>&1 | grep -v "captured a CUDA graph" \
  | tee "$OUT/r47a-small.txt" | tail -12
timeout 200 python3 benchmarks/paired.py heavy sequential \
  fxslots+offload=auto,fxslots+offload=auto:0.8,fxslots \
  --reps 11 --steps 8 --out "$OUT/r47a-heavy.json" 2>&1 | grep -v "captured a CUDA graph" \
  | tee "$OUT/r47a-heavy.txt" | tail -8
