#!/usr/bin/env bash
# Run 62b (session 42; not run: the session's device time went to failed machine starts):
# why the recovery mutant survived 61a (recovery_probe.py); the new direct test of recovery
# (a generator drawn from in a failed capture) and the mutant against it; the inference CUDA
# tests with explain's new inference record.
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r62b-gpu.txt"
t0=$(date +%s)
timeout 150 python3 benchmarks/results/h200-run62/recovery_probe.py 2>&1 \
  | grep -v "Warning\|warnings.warn" > "$OUT/r62b-recovery.txt"; cut -c1-200 "$OUT/r62b-recovery.txt"
echo "t=$(( $(date +%s) - t0 ))"
cuda_tests r62b 120 tests/test_cuda_inference.py
cuda_tests_printing r62b 150 tests/test_cuda_checkpointed_rng.py -k "recovery or failed_capture"
echo "t=$(( $(date +%s) - t0 ))"
timeout 200 python3 tools/mutation/run.py --suite cuda --markdown \
  --only recovery-leaves-generators-capturing > "$OUT/r62b-mutants.txt" 2>&1
echo "mutants rc=$?"; tail -6 "$OUT/r62b-mutants.txt"
echo "t=$(( $(date +%s) - t0 ))"
