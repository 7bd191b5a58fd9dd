#!/usr/bin/env bash
# H200 run 34a (torch 2.11): backward tangents staged in the slot's free output buffer (session
# 18-19): test_deliver_forward whole (its CPU tests under 2.11 and its CUDA test), test_cuda,
# test_cuda_reliability; footprint.py on heavy (seq 2048, slots=1) eager against fxslots (the
# staging buffer's 64 MiB should be gone); held_output.py on heavy (the held loop keeps the
# staging route, the dropped loop takes the bank route: time, reserved, copies out of the pool).
source benchmarks/gpu_setup.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_deliver_forward.py \
  -o log_level=WARNING 2>&1 | grep -v "torch.__trace" | tail -15 > "$OUT/r34a-test_deliver_forward.txt"
tail -3 "$OUT/r34a-test_deliver_forward.txt"
cuda_tests r34a 200 tests/test_cuda.py tests/test_cuda_reliability.py
for b in eager fxslots; do
  timeout 100 python3 benchmarks/footprint.py --model heavy --schedule sequential --backend $b \
    --options '{"slots": 1}' --steps 4 --seq 2048 2>&1 \
    | grep -v "captured a CUDA graph" > "$OUT/r34a-heavy-$b.txt"; head -4 "$OUT/r34a-heavy-$b.txt"
done
timeout 300 python3 benchmarks/held_output.py --model heavy --seq 2048 --reps 7 --steps 12 \
  --out "$OUT" 2>&1 | grep -v "^W1\|torch.__trace" | tail -9 | tee "$OUT/r34a-held-output.txt"
