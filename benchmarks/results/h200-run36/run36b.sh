#!/usr/bin/env bash
# H200 run 36b (torch 2.11): fxslots' per-call wrappers line by line with real replays
# (profile_step.py --lines; line_profiler carried as a cp312 wheel), launch-bound sequential and
# 1F1B, and the cost of the CUDA primitives they call, on this host.
source benchmarks/gpu_setup.sh
for s in sequential 1f1b; do
  timeout 120 python3 benchmarks/profile_step.py --lines launch-bound $s 300 2>&1 \
    | grep -v "captured a CUDA graph\|^W1\|torch.__trace" > "$OUT/r36b-lines-$s.txt"
  grep -c "" "$OUT/r36b-lines-$s.txt"
done
python3 benchmarks/results/h200-run36/primitives.py 2>&1 | tee "$OUT/r36b-primitives.txt"
