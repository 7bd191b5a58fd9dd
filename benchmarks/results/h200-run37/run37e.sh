#!/usr/bin/env bash
# H200 run 37e (torch 2.11): 37d's one failure was the test's own sizes (the masked fp32 block,
# 13 MFLOP, is past fp32's 8 MFLOP bound, so its attention rightly kept PyTorch's kernel and
# a copy); the block now runs at sequences 48 and 80. The attention tests, ATen and Inductor.
source benchmarks/gpu_setup.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_attention.py -rfE --tb=short \
  -o log_level=WARNING 2>&1 | grep -v "torch.__trace" | tail -30 > "$OUT/r37e-test_attention.txt"
tail -2 "$OUT/r37e-test_attention.txt"
FXSLOTS_KERNELS=inductor timeout 200 python3 -m pytest -q -p no:cacheprovider \
  tests/test_attention.py -k "under_cuda_graphs" -rfE --tb=short -o log_level=WARNING 2>&1 \
  | grep -v "torch.__trace" | tail -30 > "$OUT/r37e-test_attention-inductor.txt"
tail -2 "$OUT/r37e-test_attention-inductor.txt"
