#!/usr/bin/env bash
# Run 67a (session 47; R names the output prefix: 67b ran it as R=r67b): real against fake dtypes of the norms on CUDA (norm_dtypes.py), then
# CUDA test files on today's code until CALL_S (default 560) runs out (run64a.sh's loop).
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/${R:-r67a}-gpu.txt"
python benchmarks/results/h200-run67/norm_dtypes.py cuda 2>&1 | tee "$OUT/${R:-r67a}-norm-dtypes.txt"
t0=$(date +%s); call_s=${CALL_S:-560}
for name in ${FILES:-test_cuda test_cuda_inference test_share test_inductor test_cuda_reliability}; do
  left=$(( call_s - ($(date +%s) - t0) ))
  [ "$left" -gt 40 ] || { echo "not reached: $name"; continue; }
  echo "== $name (${left}s left)"
  cuda_tests ${R:-r67a} "$left" "tests/$name.py"
done
echo "t=$(( $(date +%s) - t0 ))"
