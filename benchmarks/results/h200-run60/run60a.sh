#!/usr/bin/env bash
# Run 60a (session 40): where fxslots kernels="inductor" spends its forward time on llama-large
# (run 59d: forward 14.95 ms against torch.compile default's 14.00, step level), kernel by
# kernel, forward and backward apart, with each matrix product's shapes (uncaptured case).
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r60a-gpu.txt"
t0=$(date +%s)
timeout ${LIMIT:-540} python3 benchmarks/profile_kernels.py --size llama-large --base inductor \
  --cases inductor,fxslots+kernels=inductor,fxslots+graphs+kernels=inductor,fxslots+graphs+kernels=inductor+copy_free=false \
  --out /tmp/r60a --logs-dir "$OUT/logs" > "$OUT/r60a-profile.txt" 2>&1
cp /tmp/r60a/kernels-llama-large.json "$OUT/r60a-kernels.json"
grep "ms/step\|failed" "$OUT/r60a-profile.txt"; echo "t=$(( $(date +%s) - t0 ))"
