#!/usr/bin/env bash
# H200 run 23a: the offload window (issue 10) and where reserved memory goes (footprint).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
timeout 150 python3 -m pytest -q -m cuda tests/test_cuda.py -k "offload or reload" -p no:cacheprovider \
  --timeout 120 -rfE --tb=short 2>&1 | tail -15 > "$OUT/r23a-cuda-offload.txt"; tail -5 "$OUT/r23a-cuda-offload.txt"
timeout 200 python3 benchmarks/bench.py --parts offload --models llama-small,heavy --quick --budget-s 185 \
  --out "$OUT/bench" 2>&1 | tee "$OUT/r23a-offload.txt" | grep -A12 "^model "
for b in eager fxslots; do
  timeout 60 python3 benchmarks/footprint.py --model llama-small --schedule accum --backend $b --out "$OUT/footprint" 2>&1 | tail -16
done
timeout 60 python3 benchmarks/footprint.py --model llama-small --schedule sequential --backend fxslots --out "$OUT/footprint" 2>&1 | tail -16
