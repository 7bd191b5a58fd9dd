#!/usr/bin/env bash
# H200 run 25c: the CUDA suites on this revision (best-fit slots, the last foreach_copy_
# rewrite, the new fill and pad routes), then paired same-process timings (issue 12).
source benchmarks/gpu_setup.sh
for f in tests/test_cuda.py tests/test_deliver.py tests/test_inductor.py tests/test_cuda_reliability.py; do
  n=$(basename $f .py)
  timeout 170 python3 -m pytest -q -m cuda $f -p no:cacheprovider --timeout 120 -rfE --tb=short 2>&1 \
    | grep -v "torch.__trace" | tail -15 > "$OUT/r25c-$n.txt"; echo "$n: $(tail -1 $OUT/r25c-$n.txt)"
done
timeout 100 python3 -m pytest -q -m cuda tests/test_zoo.py -p no:cacheprovider --timeout 90 -rfE --tb=short -s 2>&1 \
  | grep -E "on cuda:|passed|failed|Error" | tail -12 > "$OUT/r25c-test_zoo.txt"; cat "$OUT/r25c-test_zoo.txt"
i=0
for spec in "sequential fxslots,reduce-overhead" "sequential fxslots:accum,fxslots" "ffffbbbb fxslots,reduce-overhead"; do
  set -- $spec; i=$((i + 1))
  timeout 90 python3 benchmarks/paired.py launch-bound $1 $2 --reps 21 --out "$OUT/r25c-paired-$i.json" 2>&1 \
    | grep -v "^fxslots: v" | tail -4
done
