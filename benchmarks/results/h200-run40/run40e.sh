#!/usr/bin/env bash
# H200 run 40e: llama-large sequential, torch.compile default against fxslots
# kernels="inductor" now that attention writes its slots under Inductor (39a: 31.00 against
# 31.16 ms, attention then kept PyTorch's kernel and a copy).
source benchmarks/gpu_setup.sh
t0=$(date +%s)
timeout 280 python3 benchmarks/bench.py --parts speed --models llama-large --schedules sequential \
  --cases inductor,fxslots --fxslots-variants '[{"kernels": "inductor"}]' --reps 7 --steps 8 \
  --case-timeout-s 140 --out "$OUT/r40e" 2>&1 | grep -E "^\[speed|^\| llama" | tee "$OUT/r40e-bench.txt"
echo "t=$(( $(date +%s) - t0 ))"
