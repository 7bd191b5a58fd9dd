#!/usr/bin/env bash
# H200 run 37f (torch 2.11): fxslots' attention forward also stands for cuDNN's (bf16 SDPA on
# the H200) below 16 MFLOP: the attention tests (cuDNN's backward on fxslots' forward, the
# compiled block with cuDNN's backend), the block under kernels="inductor", and the zoo's bf16
# models on CUDA (Llama was 94.5% copy-free, all of the rest cuDNN's output and statistics).
source benchmarks/gpu_setup.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_attention.py -rfE --tb=short \
  -o log_level=WARNING 2>&1 | grep -v "torch.__trace" | tail -30 > "$OUT/r37f-test_attention.txt"
tail -4 "$OUT/r37f-test_attention.txt"
timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_zoo.py -s -rfE \
  -k "on_cuda_under_cuda_graphs and (dtype5 or dtype6 or dtype7)" --tb=short \
  -o log_level=WARNING > "$OUT/r37f-test_zoo-full.txt" 2>&1
grep -E "on cuda:|passed|failed|^E " "$OUT/r37f-test_zoo-full.txt" | grep -v "^W1" | head -20 \
  | tee "$OUT/r37f-test_zoo.txt"
FXSLOTS_KERNELS=inductor timeout 120 python3 -m pytest -q -p no:cacheprovider \
  tests/test_attention.py -k "under_cuda_graphs" -rfE --tb=short -o log_level=WARNING 2>&1 \
  | grep -v "torch.__trace" | tail -30 > "$OUT/r37f-test_attention-inductor.txt"
tail -4 "$OUT/r37f-test_attention-inductor.txt"
