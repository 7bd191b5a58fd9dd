#!/usr/bin/env bash
# H200 run 25b: host profiles (cProfile) of the launch-bound model, and what the CUDA zoo copies.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
for b in fxslots reduce-overhead; do
  timeout 90 python3 benchmarks/profile_step.py --host launch-bound sequential $b 300 > "$OUT/r25b-host-$b.txt" 2>&1
  head -1 "$OUT/r25b-host-$b.txt"
done
timeout 60 python3 benchmarks/profile_step.py --host launch-bound accum fxslots 300 > "$OUT/r25b-host-accum-fxslots.txt" 2>&1; head -1 "$OUT/r25b-host-accum-fxslots.txt"
timeout 200 python3 benchmarks/results/h200-run25/zoo_copied.py bf16 2>&1 | grep -v "^fxslots: v\|Warning\|warn" > "$OUT/r25b-zoo-copied.txt"; cat "$OUT/r25b-zoo-copied.txt"
