#!/usr/bin/env bash
# H200 run 30b: pointwise results of the delivering backward computed over the saved input they
# read last (passes/borrow.reinplace), beside 30a's borrowed temporaries. The CUDA suites that
# run the delivering backward, the zoo with every temporary eligible, then the offload part.
source benchmarks/gpu_setup.sh
cuda_tests r30b 150 tests/test_borrow.py tests/test_overlay.py tests/test_deliver.py tests/test_cuda.py tests/test_cuda_reliability.py
timeout 150 python3 -m pytest -q -m cuda tests/test_zoo.py -k temporaries -p no:cacheprovider -o log_level=WARNING \
  -rfE --tb=short 2>&1 | grep -v "torch.__trace" > "$OUT/r30b-test_zoo.txt"; tail -3 "$OUT/r30b-test_zoo.txt"
timeout 250 python3 benchmarks/bench.py --parts offload --quick --models heavy,llama-small --budget-s 230 --out "$OUT/bench-r30b" \
  2>&1 | grep -v "captured a CUDA graph" | tee "$OUT/r30b-offload.txt" | grep "^| " | head -20
