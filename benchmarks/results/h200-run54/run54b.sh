# Run 54b: llama-small's Inductor auto pair, test_inductor, llama-large's pool at one shape.
source benchmarks/gpu_setup.sh
timeout 300 python3 benchmarks/paired.py llama-small sequential \
  fxslots+kernels=inductor+offload=auto,fxslots+kernels=inductor \
  --reps 7 --steps 8 --seconds 250 --out "$OUT/r54b-small.json" 2>&1 | grep -v "torch.__trace" \
  > "$OUT/r54b-small.txt"; tail -12 "$OUT/r54b-small.txt"
cuda_tests r54b 120 tests/test_inductor.py
timeout 120 python3 benchmarks/results/h200-run30/capture_pools.py llama-large sequential \
  '{"slots": 1}' 2048 > "$OUT/r54b-pools-large.txt" 2>&1; tail -20 "$OUT/r54b-pools-large.txt"
