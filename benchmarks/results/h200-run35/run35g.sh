#!/usr/bin/env bash
# H200 run 35g (torch 2.11): the warm-up part's steady step, paired (35f ran each case in its
# own process, minutes apart): launch-bound, the 16 warm-up variants, fxslots dynamic=True
# against reduce-overhead dynamic=True and static, 21 interleaved repetitions.
source benchmarks/gpu_setup.sh
timeout 420 python3 benchmarks/paired.py launch-bound sequential \
  fxslots+dynamic=true,reduce-overhead+dynamic=true,reduce-overhead+dynamic=false --warmup-seqs \
  --reps 21 --out "$OUT/paired-lb-warmup-seqs.json" 2>&1 \
  | grep -v "captured a CUDA graph\|^W1\|torch.__trace" | tail -7 | tee "$OUT/r35g-paired.txt"
