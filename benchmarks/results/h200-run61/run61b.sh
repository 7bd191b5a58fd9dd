#!/usr/bin/env bash
# Run 61b (session 41): what a failed capture leaves in a registered generator (rng_probe.py:
# the recovery mutant survived 61a), the checkpointed-RNG tests again (61a's flash/Inductor
# model had a stride-0 value), then CUDA test files with the time left (inference graphs first).
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r61b-gpu.txt"
t0=$(date +%s)
timeout 120 python3 benchmarks/results/h200-run61/rng_probe.py 2>&1 | grep -v Warning \
  > "$OUT/r61b-probe.txt"; cut -c1-250 "$OUT/r61b-probe.txt"
echo "t=$(( $(date +%s) - t0 ))"
cuda_tests_printing r61b 200 tests/test_cuda_checkpointed_rng.py
echo "t=$(( $(date +%s) - t0 ))"
for f in ${FILES:-tests/test_cuda_inference.py tests/test_cuda_reliability.py}; do
  left=$(( ${LIMIT:-560} - $(date +%s) + t0 ))
  [ $left -gt 30 ] && cuda_tests r61b $left "$f"
  echo "t=$(( $(date +%s) - t0 ))"
done
