#!/usr/bin/env bash
# H200 run 23d: llama-small sequential vs accum with the captured backward adding in groups.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
timeout 280 python3 benchmarks/bench.py --parts speed --models llama-small --schedules sequential,accum \
  --cases eager,fxslots --reps 5 --steps 8 --budget-s 270 --case-timeout-s 120 --out "$OUT/speed-small" 2>&1 | tee "$OUT/r23d-speed-small.txt" | grep -A7 "^model "
timeout 60 python3 benchmarks/footprint.py --model llama-small --schedule accum --backend eager --out "$OUT/footprint" 2>&1 | tail -5
