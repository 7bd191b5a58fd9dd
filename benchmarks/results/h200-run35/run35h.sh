#!/usr/bin/env bash
# H200 run 35h (torch 2.11): the session's final runtime (prepare hold passes per group, the
# host-cost trims, stale graphs dropped in every executor): test_deliver_forward whole (CPU
# tests under 2.11 and the CUDA tests), test_cuda; then the 16-variant steady step paired
# against reduce-overhead dynamic=True (35g: 1.003x RO static).
source benchmarks/gpu_setup.sh
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_deliver_forward.py \
  -o log_level=WARNING 2>&1 | grep -v "torch.__trace" | tail -15 > "$OUT/r35h-test_deliver_forward.txt"
tail -1 "$OUT/r35h-test_deliver_forward.txt"
cuda_tests r35h 120 tests/test_cuda.py
timeout 110 python3 benchmarks/paired.py launch-bound sequential \
  fxslots+dynamic=true,reduce-overhead+dynamic=true --warmup-seqs --reps 21 \
  --out "$OUT/paired-lb-warmup-seqs-h.json" 2>&1 \
  | grep -v "captured a CUDA graph\|^W1\|torch.__trace" | tail -5 | tee "$OUT/r35h-paired.txt"
