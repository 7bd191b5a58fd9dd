#!/usr/bin/env bash
# H200 run 37a (torch 2.11): fxslots' attention forward (fxslots/attention.py) for SDPA's
# efficient attention. Its tests on CUDA (kernel against PyTorch's forward and backward, a
# compiled block under CUDA graphs), the kernel benchmark, the zoo on CUDA (copy-free
# fractions printed), then test_cuda (session 21's mends were not run on the GPU).
source benchmarks/gpu_setup.sh
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_attention.py -rfE --tb=short \
  -o log_level=WARNING 2>&1 | grep -v "torch.__trace" | tail -40 > "$OUT/r37a-test_attention.txt"
tail -3 "$OUT/r37a-test_attention.txt"
timeout 120 python3 benchmarks/attention.py --reps 11 --out "$OUT/attention.json" 2>&1 \
  | tee "$OUT/r37a-attention.txt" | tail -40
timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_zoo.py -s -rfE \
  --tb=short -o log_level=WARNING 2>&1 | grep -E "on cuda:|passed|failed|Error|assert" \
  | head -40 > "$OUT/r37a-test_zoo.txt"
cat "$OUT/r37a-test_zoo.txt"
cuda_tests r37a 150 tests/test_cuda.py
