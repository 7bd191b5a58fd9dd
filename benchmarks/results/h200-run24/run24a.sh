#!/usr/bin/env bash
# H200 run 24a: persistent .grad host cost (issue 12), heavy 1F1B kernel by kernel (issue 13),
# how much margin offload="auto" needs (issue 10).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
timeout 100 python3 -m pytest -q -m cuda tests/test_cuda.py -p no:cacheprovider --timeout 90 -rfE --tb=short 2>&1 \
  | grep -v "torch.__trace" | tail -15 > "$OUT/r24a-test_cuda.txt"; tail -2 "$OUT/r24a-test_cuda.txt"
timeout 60 python3 -m pytest -q tests/test_accumulate.py -p no:cacheprovider --timeout 50 -rfE --tb=short 2>&1 | tail -3
timeout 150 python3 benchmarks/bench.py --parts speed,host --models launch-bound --schedules sequential,accum \
  --cases eager,fxslots,reduce-overhead --reps 7 --steps 12 --budget-s 140 --out "$OUT/speed-lb" 2>&1 \
  | tee "$OUT/r24a-speed-lb.txt" | grep -A12 "^model " | cut -c1-180
for b in eager fxslots; do
  timeout 70 python3 benchmarks/profile_step.py heavy 1f1b $b "$OUT/k-heavy-1f1b-$b.json" > "$OUT/r24a-prof-heavy-1f1b-$b.txt" 2>&1
done
python3 benchmarks/profile_step.py --diff "$OUT/k-heavy-1f1b-eager.json" "$OUT/k-heavy-1f1b-fxslots.json" 2>&1 | tee "$OUT/r24a-diff-heavy-1f1b.txt"
timeout 150 python3 benchmarks/bench.py --parts offload --models llama-small --quick --auto-link-scales 0.85,0.7,0.55 \
  --budget-s 140 --out "$OUT/offload" 2>&1 | tee "$OUT/r24a-offload.txt" | grep -A12 "^model " | cut -c1-260
