#!/usr/bin/env bash
# H200 run 28g: join_every's default at 300 us. The delayed-side-stream test with every join
# of a graph merged into one wait; heavy auto vs none paired (its 1.01x must hold).
source benchmarks/gpu_setup.sh
timeout 90 python3 -m pytest -q -m cuda tests/test_cuda.py -k "slow_side_stream or auto" \
  -p no:cacheprovider 2>&1 | tail -2 | tee "$OUT/r28g-tests.txt"
timeout 170 python3 benchmarks/paired.py heavy sequential fxslots,fxslots+offload=auto --reps 11 \
  --out "$OUT/r28g-heavy.json" 2>&1 | grep -v "captured a CUDA graph" | grep "|\|link" | tee "$OUT/r28g-heavy.txt"
