#!/usr/bin/env bash
# H200 run 39b: the CUDA zoo under kernels="inductor" (38b ran out of its 170 s after Llama f32),
# now failing on any graph Inductor refuses; test_cuda under Inductor.
source benchmarks/gpu_setup.sh
FXSLOTS_KERNELS=inductor timeout 400 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_zoo.py -s -rfE -k "on_cuda_under_cuda_graphs" --tb=short -o log_level=WARNING \
  > "$OUT/r39b-test_zoo-inductor-full.txt" 2>&1
grep -E "on cuda:|passed|failed|^E |FAILED" "$OUT/r39b-test_zoo-inductor-full.txt" | grep -v "^W1" \
  | head -24 | tee "$OUT/r39b-test_zoo-inductor.txt"
FXSLOTS_KERNELS=inductor cuda_tests r39b 180 tests/test_cuda.py
