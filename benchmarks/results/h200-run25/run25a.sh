#!/usr/bin/env bash
# H200 run 25a: the flash SDPA probe, then both MLP models on every schedule with --rounds 3.

OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
timeout 120 python3 benchmarks/results/h200-run25/probe_flash.py > "$OUT/r25a-probe.txt" 2>&1; tail -c 9000 "$OUT/r25a-probe.txt"
timeout 420 python3 benchmarks/bench.py --parts speed --models heavy,launch-bound \
  --cases eager,fxslots,reduce-overhead --rounds 3 --reps 5 --steps 8 --budget-s 410 --out "$OUT/speed-mlp" 2>&1 \
  | tee "$OUT/r25a-speed-mlp.txt" | grep -A40 "^model " | cut -c1-170
cp "$OUT/speed-mlp/speed.json" "$OUT/r25a-speed-mlp.json" 2>/dev/null
