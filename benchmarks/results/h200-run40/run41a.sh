#!/usr/bin/env bash
# H200 run 41a (prepared in session 25, device time spent): Inductor's delivering warm-up
# leaves the gradients it delivered in the output buffer (delivery.warm_up; 40b: copied again
# into compact_grads' buffer, 0.92 GiB held twice, warm-up peak 6.51 GiB against steady 5.53).
# Expect llama-large sequential kernels="inductor" peak alloc near its steady figure. Then the
# CUDA delivery and accumulation tests under Inductor.
source benchmarks/gpu_setup.sh
t0=$(date +%s)
timeout 200 python3 benchmarks/bench.py --parts speed --models llama-large --schedules sequential,accum \
  --cases inductor,fxslots --fxslots-variants '[{"kernels": "inductor"}]' --reps 3 --steps 8 \
  --case-timeout-s 120 --out "$OUT/r41a" 2>&1 | grep -E "^\[speed|^\| llama" | tee "$OUT/r41a-bench.txt"
echo "t=$(( $(date +%s) - t0 ))"
FXSLOTS_KERNELS=inductor timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_cuda.py tests/test_deliver.py tests/test_accumulate.py -rfE --tb=short \
  -o log_level=WARNING 2>&1 | grep -v "torch.__trace" > "$OUT/r41a-cuda-inductor.txt"
grep -E "passed|failed|^FAILED|^E " "$OUT/r41a-cuda-inductor.txt" | head -20
echo "t=$(( $(date +%s) - t0 ))"
