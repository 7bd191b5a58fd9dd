#!/usr/bin/env bash
# H200 run 40f: the plain and accumulating backwards compiled by Inductor at their first call
# (kernels.Lazily). The CUDA accumulation and prepare tests under Inductor (prepare must still
# capture everything up front: a lazy compile happens in its warm-ups), then llama-large
# sequential's first-step time (warm_s; 40e: 109.9 s against torch.compile's 54.4).
source benchmarks/gpu_setup.sh
t0=$(date +%s)
FXSLOTS_KERNELS=inductor timeout 100 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_cuda.py -k "prepare or accumulat" -rfE --tb=short -o log_level=WARNING 2>&1 \
  | grep -v "torch.__trace" > "$OUT/r40f-test_cuda-inductor.txt"
grep -E "passed|failed|^FAILED|^E " "$OUT/r40f-test_cuda-inductor.txt" | head -12
echo "t=$(( $(date +%s) - t0 ))"
timeout 150 python3 benchmarks/bench.py --parts speed --models llama-large --schedules sequential \
  --cases fxslots --fxslots-variants '[{"kernels": "inductor"}]' \
  --reps 3 --steps 8 --case-timeout-s 120 --out "$OUT/r40f" 2>&1 \
  | grep -E "^\[speed|^\| llama" | tee "$OUT/r40f-bench.txt"
echo "t=$(( $(date +%s) - t0 ))"
