#!/usr/bin/env bash
# H200 run 23b: accumulation in groups under capture (issue 10 footprint), the offload window.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
for f in tests/test_cuda.py tests/test_deliver.py; do
  timeout 170 python3 -m pytest -q -m cuda $f -p no:cacheprovider --timeout 120 -rfE --tb=short 2>&1 \
    | grep -v "torch.__trace" | tail -25 > "$OUT/r23b-$(basename $f .py).txt"; tail -3 "$OUT/r23b-$(basename $f .py).txt"
done
timeout 120 python3 benchmarks/bench.py --parts speed --models llama-large --schedules sequential,accum \
  --cases eager,fxslots --quick --budget-s 110 --out "$OUT/speed-large" 2>&1 | tee "$OUT/r23b-speed-large.txt" | grep -A6 "^model "
timeout 110 python3 benchmarks/bench.py --parts speed --models llama-small --schedules sequential,accum \
  --cases eager,fxslots,reduce-overhead --quick --budget-s 100 --out "$OUT/speed-small" 2>&1 | tee "$OUT/r23b-speed-small.txt" | grep -A8 "^model "
timeout 110 python3 benchmarks/bench.py --parts offload --models llama-small --quick --budget-s 100 \
  --out "$OUT/offload" 2>&1 | tee "$OUT/r23b-offload.txt" | grep -A10 "^model "
timeout 50 python3 benchmarks/footprint.py --model llama-small --schedule accum --backend fxslots --out "$OUT/footprint" 2>&1 | tail -8
