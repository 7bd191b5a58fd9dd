#!/usr/bin/env bash
# Run 59d (session 39): llama-large sequential, fxslots kernels="inductor" against
# torch.compile default and reduce-overhead, paired (7 x 8 steps, one process): run 59b's
# separate processes read 1.003x and 1.01x.
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r59d-gpu.txt"
t0=$(date +%s)
timeout ${LIMIT:-300} python3 benchmarks/paired.py llama-large sequential \
  fxslots+kernels=inductor,inductor,reduce-overhead --reps 7 --steps 8 --seconds $(( ${LIMIT:-300} - 30 )) \
  --out "$OUT/r59d-paired.json" 2>&1 | grep -v "captured a CUDA graph" > "$OUT/r59d-paired.txt"
tail -9 "$OUT/r59d-paired.txt"; echo "t=$(( $(date +%s) - t0 ))"
