#!/usr/bin/env bash
# Run 61a (session 41): session 40's unrun CUDA code. The checkpointed-RNG tests (the failed
# capture's recovery, new; SDPA dropout under checkpointing, new) and the two CUDA mutants of
# generator registration.
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r61a-gpu.txt"
t0=$(date +%s)
cuda_tests_printing r61a ${TESTS_S:-300} tests/test_cuda_checkpointed_rng.py
grep -E "^(flash|efficient|cudnn)/" "$OUT/r61a-tests.txt"
echo "t=$(( $(date +%s) - t0 ))"
left=$(( ${LIMIT:-560} - $(date +%s) + t0 ))
timeout $left python3 tools/mutation/run.py --suite cuda --markdown \
  --only generators-not-registered recovery-leaves-generators-capturing \
  > "$OUT/r61a-mutants.txt" 2>&1; echo "mutants rc=$?"; tail -12 "$OUT/r61a-mutants.txt"
echo "t=$(( $(date +%s) - t0 ))"
