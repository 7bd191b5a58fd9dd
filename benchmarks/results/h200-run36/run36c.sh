#!/usr/bin/env bash
# H200 run 36c (torch 2.11): the CUDA tests of the files the session's runtime changes touch
# (test_cuda, test_deliver_forward, test_deliver), then issue 12's launch-bound schedules
# paired (35d: sequential 0.49x eager / 0.99x RO, 1F1B 0.90x RO, FFFFBBBB 0.98x RO).
source benchmarks/gpu_setup.sh
cuda_tests r36c 150 tests/test_cuda.py tests/test_deliver_forward.py tests/test_deliver.py
for sched in sequential 1f1b ffffbbbb; do
  cases=fxslots,reduce-overhead; [ $sched = sequential ] && cases=$cases,eager
  timeout 120 python3 benchmarks/paired.py launch-bound $sched $cases --reps 21 \
    --out "$OUT/paired-lb-$sched.json" 2>&1 | grep -v "captured a CUDA graph\|^W1\|torch.__trace" \
    | tail -6 | tee "$OUT/r36c-paired-lb-$sched.txt"
done
