#!/usr/bin/env bash
# H200 run 39d: the fixes for 39b's three Inductor failures, then issue 10's "auto" on
# llama-small, paired (39c cut to the device time left).
#  - prepare(in_flight=True) under Inductor: accumulating backwards no longer keyed by where
#    .grad is (only ATen backwards put it in an arena);
#  - fused accumulation's test pins ATen kernels (under Inductor "fused" adds as "graph");
#  - T5 bf16: every backend against fp32 (t5_bf16.py), and the zoo test against
#    torch.compile's default under Inductor.
source benchmarks/gpu_setup.sh
t0=$(date +%s)
timeout 150 python3 benchmarks/results/h200-run39/t5_bf16.py 2>&1 | grep " vs fp32" \
  | tee "$OUT/r39d-t5_bf16.txt"
echo "t=$(( $(date +%s) - t0 ))"
FXSLOTS_KERNELS=inductor timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_zoo.py -s -rfE -k "on_cuda_under_cuda_graphs and (t5 or llama)" --tb=short \
  -o log_level=WARNING 2>&1 | grep -E "on cuda:|passed|failed|^E |FAILED" | grep -v "^W1" \
  | head -12 | tee "$OUT/r39d-test_zoo-inductor.txt"
echo "t=$(( $(date +%s) - t0 ))"
for k in inductor aten; do
  FXSLOTS_KERNELS=$k timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py \
    -k "prepare_in_flight or fused_accumulation" -rfE --tb=short -o log_level=WARNING 2>&1 \
    | grep -E "passed|failed|^E |FAILED" | tee "$OUT/r39d-test_cuda-$k.txt"
done
echo "t=$(( $(date +%s) - t0 ))"
timeout 200 python3 benchmarks/paired.py llama-small sequential fxslots+offload=auto,fxslots \
  --reps 11 --steps 8 --out "$OUT/r39d-paired-auto-llama-small.json" 2>&1 | tail -5 \
  | tee "$OUT/r39d-paired-auto-llama-small.txt"
echo "t=$(( $(date +%s) - t0 ))"
