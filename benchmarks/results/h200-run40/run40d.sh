#!/usr/bin/env bash
# H200 run 40d: the CUDA zoo cases 40a's limit cut off (Mixtral f32, then bf16 Llama, T5 and
# Mixtral), under Inductor against torch.compile default. Mixtral's "Backend compiler exception
# ... _local_scalar_dense" warnings are AOTAutograd meeting its data-dependent routing (39b's
# log has the same 44, under fxslots and the reference alike): Dynamo splits the graph there.
source benchmarks/gpu_setup.sh
t0=$(date +%s)
FXSLOTS_KERNELS=inductor timeout 450 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_zoo.py -s -rfE --tb=short -o log_level=WARNING \
  -k "on_cuda_under_cuda_graphs and (mixtral-dtype4 or dtype5 or dtype6 or dtype7)" \
  > "$OUT/r40d-test_zoo-inductor-full.txt" 2>&1
grep -E "on cuda:|passed|failed|^E |FAILED" "$OUT/r40d-test_zoo-inductor-full.txt" | grep -v "^W1" \
  | head -24 | tee "$OUT/r40d-test_zoo-inductor.txt"; echo "t=$(( $(date +%s) - t0 ))"
