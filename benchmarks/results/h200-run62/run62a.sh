#!/usr/bin/env bash
# Run 62a (session 42): inference graphs' CUDA tests again (61b: the two Inductor cases failed
# on a training tolerance, not an evaluation; the test now also checks the trained parameters
# bitwise against the same compiled model trained without evaluations); rng_probe.py (61b
# failed before CUDA was initialised); the eval benchmark with Inductor kernels beside ATen's.
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r62a-gpu.txt"
t0=$(date +%s)
cuda_tests_printing r62a 120 tests/test_cuda_inference.py
echo "t=$(( $(date +%s) - t0 ))"
timeout 90 python3 benchmarks/results/h200-run62/rng_probe.py 2>&1 | grep -v Warning \
  > "$OUT/r62a-probe.txt"; cut -c1-250 "$OUT/r62a-probe.txt"
echo "t=$(( $(date +%s) - t0 ))"
left=$(( ${LIMIT:-500} - $(date +%s) + t0 ))
[ $left -gt 90 ] && timeout $left python3 benchmarks/paired.py llama-small eval \
  fxslots+capture_inference=true+kernels=inductor,fxslots+capture_inference=true,reduce-overhead,inductor,eager \
  --reps 7 --steps 8 --seconds $(( left - 40 )) --out "$OUT/r62a-eval.json" 2>&1 \
  | grep -v "captured a CUDA graph" > "$OUT/r62a-eval.txt"; tail -10 "$OUT/r62a-eval.txt"
echo "t=$(( $(date +%s) - t0 ))"
