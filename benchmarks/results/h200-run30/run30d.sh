#!/usr/bin/env bash
# H200 run 30d: the accumulating backward's capture key now holds every .grad address (one
# address let two gradient layouts share a key after prepare(in_flight=True)); the CUDA suites
# again on the final code (test_cuda holds prepare(in_flight=True) under real graphs).
source benchmarks/gpu_setup.sh
cuda_tests r30d 170 tests/test_cuda.py tests/test_cuda_reliability.py tests/test_borrow.py tests/test_overlay.py tests/test_deliver.py tests/test_prepare.py
timeout 120 python3 -m pytest -q -m cuda tests/test_zoo.py -k temporaries -p no:cacheprovider -o log_level=WARNING \
  -rfE --tb=short 2>&1 | grep -v "torch.__trace" > "$OUT/r30d-test_zoo.txt"; tail -1 "$OUT/r30d-test_zoo.txt"
