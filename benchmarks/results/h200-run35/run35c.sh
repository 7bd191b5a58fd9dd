#!/usr/bin/env bash
# H200 run 35c (torch 2.11): issue 12's speed table on today's runtime, launch-bound model,
# every schedule, eager / reduce-overhead / fxslots in one run (--quick: 5 reps x 8 steps).
source benchmarks/gpu_setup.sh
timeout 560 python3 benchmarks/bench.py --parts speed --models launch-bound \
  --schedules sequential,accum,1f1b,ffffbbbb --cases eager,reduce-overhead,fxslots --quick \
  --budget-s 500 --out "$OUT/bench-r35c" 2>&1 | grep -v "captured a CUDA graph\|^W1\|torch.__trace" \
  | tail -40 | tee "$OUT/r35c-bench.txt"
