#!/usr/bin/env bash
# Run 52a (torch 2.11): issue 10's auto against none on llama-small, paired, with paired.py's
# priming (every backend starts from one dynamic graph) and memsets="kernels" the default,
# under both kernel choices: auto under kernels="inductor" had never run, and its compute
# estimate counts ATen nodes that Inductor fuses. Then heavy's pair under Inductor.
source benchmarks/gpu_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r52a-gpu.txt"
t0=$(date +%s)
timeout 330 python3 benchmarks/paired.py llama-small sequential \
  fxslots+offload=auto,fxslots,fxslots+kernels=inductor+offload=auto,fxslots+kernels=inductor \
  --reps 11 --steps 8 --seconds 300 --out "$OUT/r52a-small.json" 2>&1 \
  | grep -v "captured a CUDA graph" | tee "$OUT/r52a-small.txt" | tail -14
echo "t=$(( $(date +%s) - t0 ))"
left=$(( 560 - $(date +%s) + t0 ))
timeout $left python3 benchmarks/paired.py heavy sequential \
  fxslots+kernels=inductor+offload=auto,fxslots+kernels=inductor \
  --reps 11 --steps 8 --seconds $(( left - 40 )) --out "$OUT/r52a-heavy.json" 2>&1 \
  | grep -v "captured a CUDA graph" | tee "$OUT/r52a-heavy.txt" | tail -10
echo "t=$(( $(date +%s) - t0 ))"
