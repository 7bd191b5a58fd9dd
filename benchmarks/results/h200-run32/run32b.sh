# H200 run 32b: the held-output loop (benchmarks/held_output.py) on heavy at sequence 2048,
# then the CUDA tests of deliver_forward (two output buffers in turn) and deliver.
source benchmarks/gpu_setup.sh
timeout 330 python3 benchmarks/held_output.py --model heavy --seq 2048 --reps 7 --steps 12 \
  --out "$OUT" 2>&1 | grep -v "^W1\|torch.__trace" | tail -12 | tee "$OUT/r32b-held-output.txt"
cuda_tests r32b 150 tests/test_deliver_forward.py tests/test_deliver.py
