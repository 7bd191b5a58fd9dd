#!/usr/bin/env bash
# H200 run 23c: warm-up gradients compacted (issue 10 footprint), accumulation in groups.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
for f in tests/test_cuda.py tests/test_deliver.py tests/test_cuda_reliability.py tests/test_overlay.py; do
  timeout 170 python3 -m pytest -q -m cuda $f -p no:cacheprovider --timeout 120 -rfE --tb=short 2>&1 \
    | grep -v "torch.__trace" | tail -25 > "$OUT/r23c-$(basename $f .py).txt"; tail -2 "$OUT/r23c-$(basename $f .py).txt"
done
timeout 60 python3 benchmarks/footprint.py --model llama-large --schedule accum --backend fxslots --out "$OUT/footprint" 2>&1 | tail -9
timeout 120 python3 benchmarks/bench.py --parts speed --models llama-large --schedules sequential,accum \
  --cases eager,fxslots --quick --budget-s 110 --out "$OUT/speed-large" 2>&1 | tee "$OUT/r23c-speed-large.txt" | grep -A6 "^model "
timeout 130 python3 benchmarks/bench.py --parts speed --models llama-small --schedules sequential,accum \
  --cases eager,fxslots,reduce-overhead --reps 5 --steps 8 --budget-s 120 --out "$OUT/speed-small" 2>&1 | tee "$OUT/r23c-speed-small.txt" | grep -A8 "^model "
