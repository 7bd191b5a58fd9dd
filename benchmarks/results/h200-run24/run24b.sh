#!/usr/bin/env bash
# H200 run 24b: large gradients added alone and large copies launched alone (issue 13's heavy
# MLP, issue 12's accum), kernel by kernel and by step time.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
for f in tests/test_cuda.py tests/test_deliver.py; do
  timeout 100 python3 -m pytest -q -m cuda $f -p no:cacheprovider --timeout 90 -rfE --tb=short 2>&1 \
    | grep -v "torch.__trace" | tail -15 > "$OUT/r24b-$(basename $f .py).txt"; tail -1 "$OUT/r24b-$(basename $f .py).txt"
done
timeout 70 python3 benchmarks/profile_step.py heavy 1f1b fxslots "$OUT/k-heavy-1f1b-fxslots-b.json" > "$OUT/r24b-prof-heavy-1f1b-fxslots.txt" 2>&1
python3 benchmarks/profile_step.py --diff benchmarks/results/h200-run24/k-heavy-1f1b-eager.json "$OUT/k-heavy-1f1b-fxslots-b.json" 2>&1 | head -12 | tee "$OUT/r24b-diff-heavy-1f1b.txt"
timeout 185 python3 benchmarks/bench.py --parts speed --models heavy,launch-bound --schedules sequential,accum,1f1b \
  --cases eager,fxslots,reduce-overhead --reps 5 --steps 8 --budget-s 175 --out "$OUT/speed-mlp" 2>&1 \
  | tee "$OUT/r24b-speed-mlp.txt" | grep -A20 "^model " | cut -c1-150
timeout 110 python3 benchmarks/bench.py --parts speed --models llama-large --schedules sequential,accum \
  --cases eager,fxslots --quick --budget-s 100 --out "$OUT/speed-large" 2>&1 | tee "$OUT/r24b-speed-large.txt" | grep -A6 "^model " | cut -c1-200
