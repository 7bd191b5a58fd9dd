#!/usr/bin/env bash
# H200 run 27a: what session 11 wrote without a GPU, first: prepare(in_flight=True) under real
# CUDA graphs (its test, then the heavy MLP's FFFFBBBB arenas and peak with each prepare); the
# order effect (none, 40 s idle, none in one process); offload="auto" against "none" paired;
# the CUDA mutants through the fork server.
source benchmarks/gpu_setup.sh
R=benchmarks/results
timeout 90 python3 -m pytest -q -m cuda tests/test_cuda.py -k prepare_in_flight -p no:cacheprovider \
  --timeout 80 -rfE --tb=short 2>&1 | grep -v "torch.__trace" | tail -15 > "$OUT/r27a-test_prepare.txt"
tail -3 "$OUT/r27a-test_prepare.txt"
for m in none default in_flight; do
  timeout 60 python3 $R/h200-run27/heavy_prepare.py $m 2>&1 | grep -v "^W1" | tail -3
done
PROFILE=0 timeout 130 python3 $R/h200-run26/dtod.py none sleep40 none 2>&1 \
  | grep -E "ms/step" | tee "$OUT/r27a-order.txt"
timeout 100 python3 benchmarks/paired.py llama-small sequential fxslots+offload=auto,fxslots \
  --out "$OUT/r27a-paired-auto.json" 2>&1 | grep -v "^W1" | tail -8 | tee "$OUT/r27a-paired-auto.txt"
timeout 150 python3 tools/mutation/run.py --suite cuda 2>&1 | tail -14 | tee "$OUT/r27a-mutants.txt"
