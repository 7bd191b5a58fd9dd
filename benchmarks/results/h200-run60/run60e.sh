#!/usr/bin/env bash
# Run 60e (session 40): llama-small with every block under activation checkpointing (a random
# op, SDPA, in each), which crashed fxslots on CUDA before this session (a capture error at
# graphsafe_run_with_rng_state), paired against reduce-overhead, torch.compile default, eager.
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r60e-gpu.txt"
t0=$(date +%s)
timeout ${LIMIT:-330} python3 benchmarks/paired.py llama-small-ckpt sequential \
  fxslots,fxslots+kernels=inductor,inductor,eager,reduce-overhead --reps 7 --steps 8 \
  --seconds $(( ${LIMIT:-330} - 40 )) --out "$OUT/r60e-paired.json" 2>&1 \
  | grep -v "captured a CUDA graph" > "$OUT/r60e-paired.txt"
tail -12 "$OUT/r60e-paired.txt"; echo "t=$(( $(date +%s) - t0 ))"
