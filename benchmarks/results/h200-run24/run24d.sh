#!/usr/bin/env bash
# H200 run 24d: the CUDA reliability and Inductor suites on this revision; a second sample of
# the launch-bound schedules and the host table; heavy FFFFBBBB with the SM clock and power
# sampled (is the slower same-kernel time a power limit?).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
for f in tests/test_cuda_reliability.py tests/test_inductor.py; do
  timeout 130 python3 -m pytest -q -m cuda $f -p no:cacheprovider --timeout 120 -rfE --tb=short 2>&1 \
    | grep -v "torch.__trace" | tail -15 > "$OUT/r24d-$(basename $f .py).txt"; tail -1 "$OUT/r24d-$(basename $f .py).txt"
done
timeout 130 python3 benchmarks/bench.py --parts speed,host --models launch-bound \
  --cases eager,fxslots,reduce-overhead --reps 7 --steps 8 --budget-s 120 --out "$OUT/speed-lb" 2>&1 \
  | tee "$OUT/r24d-speed-lb.txt" | grep -A14 "^model " | cut -c1-150
cp "$OUT/speed-lb/speed.json" "$OUT/r24d-speed-lb.json" 2>/dev/null
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 200 > "$OUT/r24d-clocks.csv" &
SMI=$!
for b in eager fxslots; do
  echo "$b start $(date +%T.%N)" >> "$OUT/r24d-clocks-cases.txt"
  timeout 45 python3 benchmarks/bench.py --parts speed --models heavy --schedules ffffbbbb \
    --cases $b --reps 5 --steps 8 --budget-s 40 --out "$OUT/speed-heavy-$b" 2>&1 \
    | tee "$OUT/r24d-speed-heavy-$b.txt" | grep -A3 "^model " | cut -c1-150
  echo "$b end $(date +%T.%N)" >> "$OUT/r24d-clocks-cases.txt"
done
kill $SMI
cat "$OUT/r24d-clocks-cases.txt"
