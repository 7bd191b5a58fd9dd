#!/usr/bin/env bash
# Run 59c (session 39): (1) llama-large 1F1B in fp32, TF32 off, against eager (run 59b's bf16
# 1F1B error was 1.3e-2 against eager's own 9.6e-3: rounding or wrong bytes?), ATen and
# Inductor kernels, with sequential as the control; (2) the CUDA tests of the pool's room and
# borrowing on session 38's last package changes (the room's fallback to shape hints, the
# reread's refactor), never run on a GPU; (3) launch-bound sequential, fxslots with each kernel
# choice against reduce-overhead, paired (issue 13: at most 1.0x reduce-overhead).
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r59c-gpu.txt"
t0=$(date +%s)
for spec in "1f1b aten" "sequential aten" "1f1b inductor"; do
  timeout 150 python3 benchmarks/results/h200-run59/fp32_check.py $spec 2>&1 \
    | grep -v "captured a CUDA graph" | tail -3 >> "$OUT/r59c-fp32.txt"
done
cat "$OUT/r59c-fp32.txt"; echo "t=$(( $(date +%s) - t0 ))"
cuda_tests_printing r59c 200 tests/test_pool_room.py tests/test_borrow.py
echo "t=$(( $(date +%s) - t0 ))"
left=$(( 580 - $(date +%s) + t0 ))
timeout $left python3 benchmarks/paired.py launch-bound sequential \
  fxslots,fxslots+kernels=inductor,reduce-overhead --reps 11 --steps 8 --seconds $(( left - 30 )) \
  --out "$OUT/r59c-paired.json" 2>&1 | grep -v "captured a CUDA graph" > "$OUT/r59c-paired.txt"
tail -9 "$OUT/r59c-paired.txt"; echo "t=$(( $(date +%s) - t0 ))"
