#!/usr/bin/env bash
# Run 61b (session 41): inference graphs' CUDA tests (new, unrun); what a failed capture leaves
# in a registered generator (rng_probe.py: the recovery mutant survived 61a); the
# checkpointed-RNG tests again (61a's flash/Inductor model had a stride-0 value); the eval
# benchmark (llama-small's loss under no_grad) with the time left.
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r61b-gpu.txt"
t0=$(date +%s)
cuda_tests r61b 120 tests/test_cuda_inference.py
echo "t=$(( $(date +%s) - t0 ))"
timeout 60 python3 benchmarks/results/h200-run62/rng_probe.py 2>&1 | grep -v Warning \
  > "$OUT/r61b-probe.txt"; cut -c1-250 "$OUT/r61b-probe.txt"
echo "t=$(( $(date +%s) - t0 ))"
cuda_tests_printing r61b 150 tests/test_cuda_checkpointed_rng.py
echo "t=$(( $(date +%s) - t0 ))"
left=$(( ${LIMIT:-500} - $(date +%s) + t0 ))
[ $left -gt 90 ] && timeout $left python3 benchmarks/paired.py llama-small eval \
  fxslots+capture_inference=true,fxslots,reduce-overhead,eager --reps 7 --steps 8 \
  --seconds $(( left - 40 )) --out "$OUT/r61b-eval.json" 2>&1 \
  | grep -v "captured a CUDA graph" > "$OUT/r61b-eval.txt"; tail -9 "$OUT/r61b-eval.txt"
echo "t=$(( $(date +%s) - t0 ))"
