#!/usr/bin/env bash
# H200 run 35d (torch 2.11): issue 12's comparisons paired (backends in one process, repetitions
# interleaved; 35c ran each case in its own process minutes apart) on the launch-bound model,
# then heavy's speed table, every schedule, eager / reduce-overhead / fxslots / fused.
source benchmarks/gpu_setup.sh
for sched in ffffbbbb 1f1b; do
  timeout 150 python3 benchmarks/paired.py launch-bound $sched fxslots,reduce-overhead --reps 21 \
    --out "$OUT/paired-lb-$sched.json" 2>&1 | grep -v "captured a CUDA graph\|^W1\|torch.__trace" \
    | tail -6 | tee "$OUT/r35d-paired-lb-$sched.txt"
done
timeout 150 python3 benchmarks/paired.py launch-bound sequential fxslots,reduce-overhead,eager \
  --reps 21 --out "$OUT/paired-lb-sequential.json" 2>&1 \
  | grep -v "captured a CUDA graph\|^W1\|torch.__trace" | tail -6 | tee "$OUT/r35d-paired-lb-sequential.txt"
timeout 300 python3 benchmarks/bench.py --parts speed --models heavy \
  --schedules sequential,accum,1f1b,ffffbbbb --cases eager,reduce-overhead,fxslots --quick \
  --fxslots-variants '[{"grad_accumulation": "fused"}]' --budget-s 260 --out "$OUT/bench-r35d" 2>&1 \
  | grep -v "captured a CUDA graph\|^W1\|torch.__trace" | grep "^heavy\|^speed" | tee "$OUT/r35d-bench.txt"
