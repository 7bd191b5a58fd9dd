#!/usr/bin/env bash
# H200 run 28f: joins of one side stream merged within DeviceCaps.join_every (100 us); the
# CUDA offload tests (a delayed side stream included), then auto vs none paired with joins
# merged at 0 (one per copy, as before), 100 us (the default) and 300 us.
source benchmarks/gpu_setup.sh
timeout 150 python3 -m pytest -q -m cuda tests/test_cuda.py tests/test_offload.py -k "offload or auto or link or stream" \
  -p no:cacheprovider 2>&1 | tail -3 | tee "$OUT/r28f-tests.txt"
export PYTHONPATH=${PYTHONPATH:-}:benchmarks
for every in 0 100e-6 300e-6; do
  timeout 170 python3 benchmarks/results/h200-run28/join_every.py $every llama-small sequential \
    fxslots,fxslots+offload=auto --reps 15 --out "$OUT/r28f-join$every.json" 2>&1 \
    | grep -v "captured a CUDA graph" | tail -5 | tee "$OUT/r28f-join$every.txt"
done
