#!/usr/bin/env bash
# H200 run 37b (torch 2.11): the attention forward takes an additive bias (the mask HuggingFace
# builds under torch.compile, which kept the zoo's Llama and Mixtral off the route in 37a).
# Its tests, the kernel benchmark (fixed: 37a copied host seeds in a capture), the zoo on CUDA.
source benchmarks/gpu_setup.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_attention.py -rfE --tb=short \
  -o log_level=WARNING 2>&1 | grep -v "torch.__trace" | tail -40 > "$OUT/r37b-test_attention.txt"
tail -3 "$OUT/r37b-test_attention.txt"
timeout 150 python3 benchmarks/attention.py --reps 11 --out "$OUT/attention.json" 2>&1 \
  | tee "$OUT/r37b-attention.txt" | tail -40
timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_zoo.py -s -rfE \
  --tb=short -o log_level=WARNING > "$OUT/r37b-test_zoo-full.txt" 2>&1
grep -E "on cuda:|passed|failed|^E " "$OUT/r37b-test_zoo-full.txt" | head -40 \
  | tee "$OUT/r37b-test_zoo.txt"
