#!/usr/bin/env bash
# H200 run 23e: the MLP models on every schedule (issues 12, 13) after this session's changes.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
timeout 200 python3 benchmarks/bench.py --parts speed --models heavy,launch-bound --quick --cases eager,fxslots,reduce-overhead \
  --budget-s 190 --out "$OUT/speed-mlp" 2>&1 | tee "$OUT/r23e-speed-mlp.txt" | grep -A17 "^model " | cut -c1-200
timeout 120 python3 benchmarks/bench.py --parts speed --models heavy --schedules accum,1f1b --cases eager,fxslots,reduce-overhead \
  --reps 5 --steps 6 --budget-s 110 --out "$OUT/speed-heavy" 2>&1 | tee "$OUT/r23e-speed-heavy.txt" | grep -A8 "^model " | cut -c1-200
timeout 130 python3 -m pytest -q -m cuda tests/test_inductor.py -p no:cacheprovider --timeout 120 -rfE --tb=short 2>&1 \
  | grep -v "torch.__trace" | tail -15 > "$OUT/r23e-test_inductor.txt"; tail -3 "$OUT/r23e-test_inductor.txt"
