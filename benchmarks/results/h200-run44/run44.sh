#!/usr/bin/env bash
# H200 run 44 (prepared in session 29, not run: its device time was spent): gradients under
# 1 MiB that Inductor's kernels compute are no longer fenced (fence.unfenced_small).
# 1. Under Inductor, the CUDA tests of fences, overlay, delivery and test_cuda.
# 2. paired.py llama-large sequential: fenced arena, buffer, torch.compile default.
# The ATen CUDA tests 42c/42d cut (test_deliver_forward, test_inductor) need a call of their own.
source benchmarks/gpu_setup.sh
t0=$(date +%s)
FXSLOTS_KERNELS=inductor FXSLOTS_FAILURES_FILE="$OUT/r44-failures.txt" timeout 250 \
  python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_fence.py tests/test_overlay.py \
  tests/test_deliver.py tests/test_cuda.py -rfE --tb=short -o log_level=WARNING 2>&1 \
  | grep -v "torch.__trace" > "$OUT/r44-cuda-inductor.txt"
grep -E "passed|failed|^FAILED|^E " "$OUT/r44-cuda-inductor.txt" | head -20
echo "t=$(( $(date +%s) - t0 ))"
timeout 230 python3 benchmarks/paired.py llama-large sequential \
  fxslots+kernels=inductor,fxslots+kernels=inductor+grads_in_arena=false,inductor \
  --reps 7 --steps 8 --out "$OUT/r44-paired.json" 2>&1 | grep -v "torch.__trace" \
  | tail -8 | tee "$OUT/r44-paired.txt"
echo "t=$(( $(date +%s) - t0 ))"
