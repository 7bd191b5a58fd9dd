#!/usr/bin/env bash
# H200 run 25e: the CUDA zoo in fp32 and bf16 after the masked_fill route (issue 11).
source benchmarks/gpu_setup.sh
timeout 300 python3 -m pytest -q -m cuda tests/test_zoo.py -p no:cacheprovider --timeout 120 -rfE --tb=short -s 2>&1 \
  | grep -v "exc.py\|^W1\|torch.__trace" > "$OUT/r25e-test_zoo.txt"
grep -E "on cuda:|passed|failed|^FAILED|^E " "$OUT/r25e-test_zoo.txt" | head -30
timeout 200 python3 benchmarks/results/h200-run25/zoo_copied.py bf16 2>&1 | grep -E "^==|^   " > "$OUT/r25e-zoo-copied.txt"; cat "$OUT/r25e-zoo-copied.txt"
