#!/usr/bin/env bash
# H200 run 30c: the CUDA borrow test on a model whose loss is inside it (30b's MLP test could
# not show a pool difference: 8 MiB blocks share 20 MiB segments); what each capture holds in
# the shared pool (heavy, llama-small); llama-large sequential (the warm-up estimate's pick,
# speed) and heavy sequential over its four variants, eager against fxslots.
source benchmarks/gpu_setup.sh
cuda_tests r30c 120 tests/test_borrow.py
for m in heavy llama-small; do
  s=$([ $m = heavy ] && echo 2048 || echo 512)
  timeout 90 python3 benchmarks/results/h200-run30/capture_pools.py $m sequential '{"slots": 1}' $s 2>&1 \
    | grep -v "captured a CUDA graph" | tee "$OUT/r30c-pools-$m.txt" | grep -E "capture|segments"
done
timeout 150 python3 benchmarks/bench.py --parts speed --models llama-large --schedules sequential \
  --cases eager,fxslots --quick --budget-s 140 --out "$OUT/bench-r30c-large" 2>&1 \
  | grep -v "captured a CUDA graph" | tee "$OUT/r30c-llama-large.txt" | grep "^| " | head -4
timeout 120 python3 benchmarks/bench.py --parts speed --models heavy --schedules sequential \
  --cases eager,fxslots --quick --budget-s 110 --out "$OUT/bench-r30c-heavy" 2>&1 \
  | grep -v "captured a CUDA graph" | tee "$OUT/r30c-heavy.txt" | grep "^| " | head -4
