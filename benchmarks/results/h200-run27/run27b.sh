#!/usr/bin/env bash
# H200 run 27b: why the forked CUDA mutation run failed (27a) and the CUDA mutants in fresh
# interpreters; the order effect function by function (order.py); identical backends paired
# (does paired.py carry an order effect?); offload="auto"'s cost split into host and device,
# forward and backward (split.py).
source benchmarks/gpu_setup.sh
R=benchmarks/results/h200-run27
timeout 100 python3 $R/fork_cuda.py 2>&1 | tail -20 | tee "$OUT/r27b-fork-cuda.txt"
timeout 110 python3 $R/order.py fxslots fxslots fxslots 2>&1 | grep -v "^W1\|Warn" > "$OUT/r27b-order-fxslots.txt"
grep "==" "$OUT/r27b-order-fxslots.txt"
timeout 60 python3 $R/order.py eager eager 2>&1 | grep -v "^W1\|Warn" > "$OUT/r27b-order-eager.txt"
grep "==" "$OUT/r27b-order-eager.txt"
timeout 70 python3 $R/split.py 2>&1 | tail -3 | tee "$OUT/r27b-split.txt"
timeout 70 python3 benchmarks/paired.py llama-small sequential fxslots,fxslots+slots=1 \
  --out "$OUT/r27b-paired-same.json" 2>&1 | tail -3 | tee "$OUT/r27b-paired-same.txt"
timeout 70 python3 benchmarks/paired.py llama-small sequential fxslots,fxslots+offload=auto \
  --out "$OUT/r27b-paired-auto-reversed.json" 2>&1 | tail -3 | tee "$OUT/r27b-paired-auto-rev.txt"
timeout 170 python3 tools/mutation/run.py --suite cuda 2>&1 | tail -14 | tee "$OUT/r27b-mutants.txt"
