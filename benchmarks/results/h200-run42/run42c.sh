#!/usr/bin/env bash
# H200 run 42c. 42a: kernels="inductor" with gradients in the arena kept the buffer's steady
# peak (5.53 GiB) to the byte: Inductor's delivering twin warms up writing every gradient into
# the output buffer, which never shrank. Now the backwards that place gradients deliver the
# rest into a buffer of their own, and the full one is freed (delivery.Deliveries.release).
# 1. llama-large sequential: torch.compile default, fxslots ATen, fxslots kernels=inductor
#    (gradients in the arena); expect its steady peak near 4.80 GiB, grad_bytes_in_arena > 0.
# 2. The CUDA suite under ATen kernels (session 27's factory kwargs; this change).
# 3. The arena, fence and delivery CUDA tests under Inductor.
source benchmarks/gpu_setup.sh
t0=$(date +%s)
timeout 230 python3 benchmarks/bench.py --parts speed --models llama-large \
  --schedules sequential --cases inductor,fxslots \
  --fxslots-variants '[{"kernels": "inductor"}]' \
  --reps 3 --steps 8 --case-timeout-s 120 --out "$OUT/r42c" 2>&1 \
  | grep -E "^\[speed|^\| llama" | tee "$OUT/r42c-bench.txt"
python3 -c "
import json; d = json.load(open('$OUT/r42c/speed.json'))
for r in d['rows']: print(r['case'], 'steady', r.get('peak_steady_gib'), 'warm', r.get('peak_warm_gib'), 'reserved', r.get('reserved_gib'), 'in_arena', r.get('grad_bytes_in_arena'))"
echo "t=$(( $(date +%s) - t0 ))"
FXSLOTS_FAILURES_FILE="$OUT/r42c-failures.txt" timeout 210 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_cuda.py tests/test_cuda_reliability.py tests/test_borrow.py tests/test_deliver.py \
  tests/test_deliver_forward.py tests/test_overlay.py tests/test_inductor.py -rfE --tb=short \
  -o log_level=WARNING 2>&1 | grep -v "torch.__trace" > "$OUT/r42c-cuda-aten.txt"
grep -E "passed|failed|^FAILED|^E " "$OUT/r42c-cuda-aten.txt" | head -20
echo "t=$(( $(date +%s) - t0 ))"
FXSLOTS_KERNELS=inductor timeout 100 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_overlay.py tests/test_fence.py tests/test_deliver.py tests/test_accumulate.py \
  -rfE --tb=short -o log_level=WARNING 2>&1 | grep -v "torch.__trace" > "$OUT/r42c-cuda-inductor.txt"
grep -E "passed|failed|^FAILED|^E " "$OUT/r42c-cuda-inductor.txt" | head -20
echo "t=$(( $(date +%s) - t0 ))"
