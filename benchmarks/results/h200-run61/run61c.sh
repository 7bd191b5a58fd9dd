#!/usr/bin/env bash
# Run 61c (session 41): run 61b cut to what 230 s of device time holds (failed starts spent the
# rest): inference graphs' CUDA tests, the failed-capture generator probe, the RNG tests.
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r61c-gpu.txt"
t0=$(date +%s)
cuda_tests r61c 100 tests/test_cuda_inference.py
echo "t=$(( $(date +%s) - t0 ))"
timeout 40 python3 benchmarks/results/h200-run62/rng_probe.py 2>&1 | grep -v Warning \
  > "$OUT/r61c-probe.txt"; cut -c1-250 "$OUT/r61c-probe.txt"
echo "t=$(( $(date +%s) - t0 ))"
left=$(( ${LIMIT:-200} - $(date +%s) + t0 ))
[ $left -gt 20 ] && cuda_tests_printing r61c $left tests/test_cuda_checkpointed_rng.py \
  -k "attention_dropout or failed_capture"
echo "t=$(( $(date +%s) - t0 ))"
