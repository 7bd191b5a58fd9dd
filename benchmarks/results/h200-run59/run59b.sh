#!/usr/bin/env bash
# Run 59b (session 39): issue 13's table for the compute-bound transformer in one run on
# today's code: llama-large (H=2048, 8 layers, batch 4, sequences 1024 and 2048), sequential,
# accum and 1F1B, eager / torch.compile default / reduce-overhead / fxslots (ATen) / fxslots
# kernels="inductor", 5 x 8 steps each, every case in its own process. R (the files' prefix)
# lets a later run repeat it.
R=${R:-r59b}
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/$R-gpu.txt"
t0=$(date +%s)
timeout 585 python3 benchmarks/bench.py --parts speed --models llama-large \
  --schedules sequential,accum,1f1b --reps 5 --steps 8 --budget-s 540 --case-timeout-s 150 \
  --fxslots-variants '[{"kernels": "inductor"}]' --out /tmp/bench-$R 2>&1 \
  | grep -v "captured a CUDA graph" > "$OUT/$R-speed.txt"; grep "^| " "$OUT/$R-speed.txt"
cp /tmp/bench-$R/*.json "$OUT/" 2>/dev/null
echo "t=$(( $(date +%s) - t0 ))"
