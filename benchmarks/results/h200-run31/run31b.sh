#!/usr/bin/env bash
# H200 run 31b: the offload part (footprint: reserved against eager's) on 31a's code.
source benchmarks/gpu_setup.sh
timeout 250 python3 benchmarks/bench.py --parts offload --quick --models heavy,llama-small --budget-s 230 --out "$OUT/bench-r31b" \
  2>&1 | grep -v "captured a CUDA graph" | tee "$OUT/r31b-offload.txt" | grep "^| " | head -20
