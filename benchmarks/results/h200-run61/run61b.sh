#!/usr/bin/env bash
# Run 61b (session 41): what a failed capture leaves in a registered generator (rng_probe.py:
# the recovery mutant survived 61a), the checkpointed-RNG tests again (61a's flash/Inductor
# model had a stride-0 value), inference graphs' CUDA tests and an eval benchmark, then
# test_cuda_reliability with the time left.
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r61b-gpu.txt"
t0=$(date +%s)
timeout 120 python3 benchmarks/results/h200-run61/rng_probe.py 2>&1 | grep -v Warning \
  > "$OUT/r61b-probe.txt"; cut -c1-250 "$OUT/r61b-probe.txt"
echo "t=$(( $(date +%s) - t0 ))"
cuda_tests_printing r61b 200 tests/test_cuda_checkpointed_rng.py
echo "t=$(( $(date +%s) - t0 ))"
cuda_tests r61b 150 tests/test_cuda_inference.py
echo "t=$(( $(date +%s) - t0 ))"
timeout ${EVAL_S:-200} python3 benchmarks/paired.py llama-small eval \
  fxslots,fxslots+cudagraphs=false,reduce-overhead,eager --reps 7 --steps 8 \
  --seconds $(( ${EVAL_S:-200} - 40 )) --out "$OUT/r61b-eval.json" 2>&1 \
  | grep -v "captured a CUDA graph" > "$OUT/r61b-eval.txt"; tail -9 "$OUT/r61b-eval.txt"
echo "t=$(( $(date +%s) - t0 ))"
for f in ${FILES:-tests/test_cuda_reliability.py}; do
  left=$(( ${LIMIT:-560} - $(date +%s) + t0 ))
  [ $left -gt 30 ] && cuda_tests r61b $left "$f"
  echo "t=$(( $(date +%s) - t0 ))"
done
