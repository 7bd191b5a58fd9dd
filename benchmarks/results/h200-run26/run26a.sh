#!/usr/bin/env bash
# H200 run 26a: the .grad check cache (session 10) on the GPU: the CUDA suites that run
# persistent .grad buffers, where accum's host time goes now, and paired timings (issue 12).
source benchmarks/gpu_setup.sh
for f in tests/test_cuda.py tests/test_accumulate.py tests/test_deliver.py tests/test_cuda_reliability.py; do
  n=$(basename $f .py)
  timeout 170 python3 -m pytest -q $f -p no:cacheprovider --timeout 120 -rfE --tb=short 2>&1 \
    | grep -v "torch.__trace" | tail -15 > "$OUT/r26a-$n.txt"; echo "$n: $(tail -1 $OUT/r26a-$n.txt)"
done
timeout 60 python3 benchmarks/results/h200-run25/accum_parts.py 2>&1 | grep -v "^fxslots: v" | tee "$OUT/r26a-accum-parts.txt"
i=0
for spec in "sequential fxslots:accum,fxslots" "sequential fxslots,reduce-overhead" "sequential eager:accum,eager"; do
  set -- $spec; i=$((i + 1))
  timeout 90 python3 benchmarks/paired.py launch-bound $1 $2 --reps 21 --out "$OUT/r26a-paired-$i.json" 2>&1 \
    | grep -v "^fxslots: v" | tail -4
done
