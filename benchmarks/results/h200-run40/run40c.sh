#!/usr/bin/env bash
# H200 run 40c: (1) the three dynamic attention blocks that failed in 40a, after collect.py
# takes every output of an attention call of symbolic size off fxslots' kernel (its static
# seed and offset had kept the op in the graph); (2) why Mixtral's compile failed under
# Inductor in 40a ("Backend compiler fxslots failed with aten._local_scalar_dense.default",
# each frame graph-broken until the limit): one Mixtral f32 zoo case with Dynamo's verbose
# tracebacks; (3) run40b's footprint comparison.
source benchmarks/gpu_setup.sh
t0=$(date +%s)
FXSLOTS_KERNELS=inductor timeout 100 python3 -m pytest -q -p no:cacheprovider \
  tests/test_attention.py -k "under_cuda_graphs and True-False" -rfE --tb=short \
  -o log_level=WARNING 2>&1 | grep -v "torch.__trace" > "$OUT/r40c-attention-dynamic.txt"
grep -E "passed|failed|FAILED|could not" "$OUT/r40c-attention-dynamic.txt" | cut -c1-300 | head
echo "t=$(( $(date +%s) - t0 ))"
TORCHDYNAMO_VERBOSE=1 FXSLOTS_KERNELS=inductor timeout 100 python3 -m pytest -q -p no:cacheprovider \
  -m cuda tests/test_zoo.py -s -x -k "on_cuda_under_cuda_graphs and mixtral-dtype4" --tb=short \
  -o log_level=WARNING > "$OUT/r40c-mixtral-verbose-full.txt" 2>&1
grep -n -m1 -B2 -A120 "Traceback (most recent call last)" "$OUT/r40c-mixtral-verbose-full.txt" \
  | grep -v "torch.__trace" > "$OUT/r40c-mixtral-traceback.txt"
grep -E "fxslots/" "$OUT/r40c-mixtral-traceback.txt" | head -30
echo "t=$(( $(date +%s) - t0 ))"
bash benchmarks/results/h200-run40/run40b.sh
echo "t=$(( $(date +%s) - t0 ))"
