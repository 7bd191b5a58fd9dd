#!/usr/bin/env bash
# H200 run 37c (torch 2.11): the route is taken by cost (attention.MAX_FLOPS, from 37b's
# figures); the benchmark on sizes either side of the bounds, with fp32 as three TF32 products
# beside; the attention tests (the bias cases' rows now 16-byte aligned, as PyTorch's kernel
# wants); the zoo's fp32 models on CUDA against their new floors.
source benchmarks/gpu_setup.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_attention.py -rfE --tb=short \
  -o log_level=WARNING 2>&1 | grep -v "torch.__trace" | tail -30 > "$OUT/r37c-test_attention.txt"
tail -3 "$OUT/r37c-test_attention.txt"
timeout 200 python3 benchmarks/attention.py --reps 11 --out "$OUT/attention.json" 2>&1 \
  | tee "$OUT/r37c-attention.txt" | grep -v "backward"
timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_zoo.py -k "float32" -s \
  -rfE --tb=short -o log_level=WARNING > "$OUT/r37c-test_zoo-full.txt" 2>&1
grep -E "on cuda:|passed|failed|^E " "$OUT/r37c-test_zoo-full.txt" | grep -v "^W1" | head -20
