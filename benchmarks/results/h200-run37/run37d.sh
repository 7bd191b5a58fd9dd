#!/usr/bin/env bash
# H200 run 37d (torch 2.11): the final state. The attention tests, the compiled block again
# under kernels="inductor" (Inductor compiles the graph that calls fxslots' attention op), and
# the whole zoo on CUDA against its new fp32 floors.
source benchmarks/gpu_setup.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_attention.py -rfE --tb=short \
  -o log_level=WARNING 2>&1 | grep -v "torch.__trace" | tail -30 > "$OUT/r37d-test_attention.txt"
tail -2 "$OUT/r37d-test_attention.txt"
FXSLOTS_KERNELS=inductor timeout 200 python3 -m pytest -q -p no:cacheprovider \
  tests/test_attention.py -k "under_cuda_graphs" -rfE --tb=short -o log_level=WARNING 2>&1 \
  | grep -v "torch.__trace" | tail -30 > "$OUT/r37d-test_attention-inductor.txt"
tail -2 "$OUT/r37d-test_attention-inductor.txt"
timeout 220 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_zoo.py -s -rfE \
  --tb=short -o log_level=WARNING > "$OUT/r37d-test_zoo-full.txt" 2>&1
grep -E "on cuda:|passed|failed|^E " "$OUT/r37d-test_zoo-full.txt" | grep -v "^W1" | head -30 \
  | tee "$OUT/r37d-test_zoo.txt"
