#!/usr/bin/env bash
# H200 run 34c (torch 2.11): grad_accumulation="fused" (a weight gradient that is a matrix
# product is added into .grad by its GEMM, beta=1, under CUDA graphs). test_accumulate whole (its
# CPU tests under 2.11); then bench.py's speed part on heavy, sequential and accum, eager,
# reduce-overhead, fxslots and fxslots fused, in one run.
source benchmarks/gpu_setup.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_accumulate.py \
  -o log_level=WARNING 2>&1 | grep -v "torch.__trace" | tail -8 > "$OUT/r34c-test_accumulate.txt"
tail -2 "$OUT/r34c-test_accumulate.txt"
timeout 380 python3 benchmarks/bench.py --parts speed --models heavy --schedules sequential,accum \
  --cases eager,reduce-overhead,fxslots --fxslots-variants '[{"grad_accumulation": "fused"}]' \
  --out "$OUT/bench" 2>&1 | grep -v "^W1\|torch.__trace" | tail -14 | tee "$OUT/r34c-bench.txt"
