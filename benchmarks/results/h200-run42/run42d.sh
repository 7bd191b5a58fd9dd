#!/usr/bin/env bash
# H200 run 42d: 42c's one failure (a CUDA test that looked for gradients in the full output
# buffer only, now freed once they go into the arena), the ATen CUDA tests 42c's limit cut off,
# and the CUDA tests of prepare, arenas, fences and delivery under Inductor.
source benchmarks/gpu_setup.sh
t0=$(date +%s)
timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_deliver.py \
  tests/test_deliver_forward.py tests/test_overlay.py tests/test_inductor.py -rfE --tb=short \
  -o log_level=WARNING 2>&1 | grep -v "torch.__trace" > "$OUT/r42d-cuda-aten.txt"
grep -E "passed|failed|^FAILED|^E " "$OUT/r42d-cuda-aten.txt" | head -20
echo "t=$(( $(date +%s) - t0 ))"
FXSLOTS_KERNELS=inductor FXSLOTS_FAILURES_FILE="$OUT/r42d-failures.txt" timeout 250 \
  python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_deliver.py tests/test_overlay.py \
  tests/test_cuda.py tests/test_fence.py -rfE --tb=short -o log_level=WARNING 2>&1 | grep -v "torch.__trace" \
  > "$OUT/r42d-cuda-inductor.txt"
grep -E "passed|failed|^FAILED|^E " "$OUT/r42d-cuda-inductor.txt" | head -20
echo "t=$(( $(date +%s) - t0 ))"
