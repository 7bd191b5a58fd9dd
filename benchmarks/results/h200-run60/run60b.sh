#!/usr/bin/env bash
# Run 60b (session 40): run 60a found fxslots' captured GEMMs and attention 1-2.5% slower per
# kernel than torch.compile default's (the same kernels, same shapes; uncaptured, level). Is it
# the capture (reduce-overhead alongside) and the SM clock (sampled from NVML)?
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader \
  | tee "$OUT/r60b-gpu.txt"
t0=$(date +%s)
timeout ${LIMIT:-400} python3 benchmarks/profile_kernels.py --size llama-large --base inductor \
  --cases inductor,reduce-overhead,fxslots+graphs+kernels=inductor,inductor \
  --out /tmp/r60b > "$OUT/r60b-profile.txt" 2>&1
cp /tmp/r60b/kernels-llama-large.json "$OUT/r60b-kernels.json"
grep "ms/step\|failed" "$OUT/r60b-profile.txt"; echo "t=$(( $(date +%s) - t0 ))"
