#!/usr/bin/env bash
# H200 run 26b: user outputs a backward saves written in the slot and copied out of it once
# (issue 11: T5's caches, Mixtral's top-k), through the CUDA suites and the zoo.
source benchmarks/gpu_setup.sh
timeout 200 python3 benchmarks/results/h200-run25/zoo_copied.py bf16 2>&1 | grep -E "^==|^   " > "$OUT/r26b-zoo-copied.txt"; cat "$OUT/r26b-zoo-copied.txt"
timeout 240 python3 -m pytest -q -m cuda tests/test_zoo.py -p no:cacheprovider --timeout 120 -rfE --tb=short -s 2>&1 \
  | grep -v "exc.py\|^W1\|torch.__trace" > "$OUT/r26b-test_zoo.txt"
grep -E "on cuda:|passed|failed|^FAILED|^E " "$OUT/r26b-test_zoo.txt" | head -30
for f in tests/test_cuda.py tests/test_cuda_reliability.py tests/test_inductor.py tests/test_deliver.py; do
  n=$(basename $f .py)
  timeout 150 python3 -m pytest -q -m cuda $f -p no:cacheprovider --timeout 120 -rfE --tb=short 2>&1 \
    | grep -v "torch.__trace" | tail -15 > "$OUT/r26b-$n.txt"; echo "$n: $(tail -1 $OUT/r26b-$n.txt)"
done
