#!/usr/bin/env bash
# H200 run 35f (torch 2.11): issue 12's warm-up over 16 sequence variants (fxslots dynamic=True
# with and without prepare, reduce-overhead dynamic=True / default / static) and host
# microseconds per call, launch-bound model.
source benchmarks/gpu_setup.sh
timeout 500 python3 benchmarks/bench.py --parts host,warmup --models launch-bound \
  --budget-s 460 --out "$OUT/bench-r35f" 2>&1 \
  | grep -v "captured a CUDA graph\|^W1\|torch.__trace" | grep "^launch-bound\|^host\|^warmup\|^model" \
  | tee "$OUT/r35f-bench.txt"
