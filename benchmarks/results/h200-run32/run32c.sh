# H200 run 32c: held_output.py again (reduce-overhead's failed gradient check no longer stops
# its case), then the CUDA suites test_cuda and test_cuda_reliability on the two-buffer code.
source benchmarks/gpu_setup.sh
timeout 300 python3 benchmarks/held_output.py --model heavy --seq 2048 --reps 7 --steps 12 \
  --out "$OUT" 2>&1 | grep -v "^W1\|torch.__trace" | tail -9 | tee "$OUT/r32c-held-output.txt"
cuda_tests r32c 150 tests/test_cuda.py tests/test_cuda_reliability.py
