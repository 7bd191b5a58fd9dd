#!/usr/bin/env bash
# H200 run 24c: offload memory A/B against the last session's revision (aa15a0e, unpacked in
# ab/old, not committed), then both MLP models on every schedule, four backends (issue 12's
# closing table).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
for v in old new; do
  if [ $v = old ]; then PP=$PWD/ab/old:$PYTHONPATH; B=ab/old/benchmarks/bench.py; else PP=$PYTHONPATH; B=benchmarks/bench.py; fi
  PYTHONPATH=$PP python3 -c "import fxslots; print('$v', fxslots.__file__)"
  PYTHONPATH=$PP timeout 80 python3 $B --parts offload --models llama-small --quick --cases fxslots \
    --budget-s 70 --out "$OUT/ab-$v" 2>&1 | tee "$OUT/r24c-offload-$v.txt" | grep -A8 "^model " | cut -c1-150
done
timeout 330 python3 benchmarks/bench.py --parts speed --models heavy,launch-bound \
  --cases eager,fxslots,reduce-overhead,inductor --reps 5 --steps 8 --budget-s 320 --out "$OUT/speed-mlp" 2>&1 \
  | tee "$OUT/r24c-speed-mlp.txt" | grep -A36 "^model " | cut -c1-150
cp "$OUT/speed-mlp/speed.json" "$OUT/r24c-speed-mlp.json"
