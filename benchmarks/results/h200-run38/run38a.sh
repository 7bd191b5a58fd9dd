#!/usr/bin/env bash
# H200 run 38a (torch 2.11): the first GPU run of session 22's changes after 37f (the masked-row
# fix, (batch x heads) on the grid's first axis, int64 offsets, the capability / batch /
# key-length checks, sizes compared by expression, the runtime fallback, the Inductor
# exclusion, the shared _place): the attention tests, the compiled block under
# kernels="inductor" (attention must keep PyTorch's kernel: no "Can't generate FallbackKernel"),
# test_cuda, and the attention benchmark (did int64 offsets move the cost bounds?).
source benchmarks/gpu_setup.sh
t0=$(date +%s)
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_attention.py -rfE --tb=short \
  -o log_level=WARNING 2>&1 | grep -v "torch.__trace" | tail -40 > "$OUT/r38a-test_attention.txt"
tail -4 "$OUT/r38a-test_attention.txt"; echo "t=$(( $(date +%s) - t0 ))"
FXSLOTS_KERNELS=inductor timeout 100 python3 -m pytest -q -p no:cacheprovider \
  tests/test_attention.py -k "under_cuda_graphs" -rfE --tb=short -o log_level=WARNING \
  > "$OUT/r38a-inductor-full.txt" 2>&1
grep -c "FallbackKernel" "$OUT/r38a-inductor-full.txt" | sed 's/^/FallbackKernel lines: /'
tail -30 "$OUT/r38a-inductor-full.txt" | grep -v "torch.__trace" > "$OUT/r38a-test_attention-inductor.txt"
tail -3 "$OUT/r38a-test_attention-inductor.txt"; echo "t=$(( $(date +%s) - t0 ))"
cuda_tests r38a 170 tests/test_cuda.py; echo "t=$(( $(date +%s) - t0 ))"
timeout 150 python3 benchmarks/attention.py --reps 11 --out "$OUT/r38a-attention.json" 2>&1 \
  | tail -60 > "$OUT/r38a-attention.txt"
cat "$OUT/r38a-attention.txt" | head -70; echo "t=$(( $(date +%s) - t0 ))"
