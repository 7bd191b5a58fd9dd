#!/usr/bin/env bash
# Run 60c (session 40): checkpointed random ops on CUDA. Graph-safe RNG functionalization hands
# fxslots' graphs generators; captures now register them (pool.register_generators).
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r60c-gpu.txt"
t0=$(date +%s)
timeout 150 python3 benchmarks/results/h200-run60/rng_before.py 2>&1 \
  | grep -v "captured a CUDA graph" > "$OUT/r60c-before.txt"
cat "$OUT/r60c-before.txt" | cut -c1-300; echo "t=$(( $(date +%s) - t0 ))"
cuda_tests_printing r60c ${LIMIT:-330} tests/test_cuda_checkpointed_rng.py tests/test_cuda.py
echo "t=$(( $(date +%s) - t0 ))"
