#!/usr/bin/env bash
# H200 run 36b (torch 2.11): the session's host-cost trims (AOTAutograd's dynamic marks dropped
# for saved tensors in the slot, outputs viewed in runs grouped by geometry, one-output copies,
# the slot ring's fast path, the autograd-node chain, one-tensor copies): fxslots' parts per call
# with real replays (36a before them), then the 16-variant steady step paired against
# reduce-overhead dynamic=True and static (35g: 1.035x RO static, 35h: 1.057x RO dynamic).
source benchmarks/gpu_setup.sh
timeout 90 python3 benchmarks/profile_step.py --components launch-bound sequential 400 2>&1 \
  | grep -v "captured a CUDA graph\|^W1\|torch.__trace" | tail -20 | tee "$OUT/r36b-components.txt"
timeout 440 python3 benchmarks/paired.py launch-bound sequential \
  fxslots+dynamic=true,reduce-overhead+dynamic=true,reduce-overhead+dynamic=false --warmup-seqs \
  --reps 21 --out "$OUT/paired-lb-warmup-seqs.json" 2>&1 \
  | grep -v "captured a CUDA graph\|^W1\|torch.__trace" | tail -7 | tee "$OUT/r36b-paired.txt"
