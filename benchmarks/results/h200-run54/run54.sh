# Run 54 (session 36): the link both ways, test_cuda, then llama-small's ATen auto pair.
source benchmarks/gpu_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for i in 1 2 3; do python3 benchmarks/results/h200-run54/link_ways.py; done 2>&1 | tee "$OUT/r54-link.txt"
cuda_tests r54 200 tests/test_cuda.py
timeout 280 python3 benchmarks/paired.py llama-small sequential fxslots+offload=auto,fxslots \
  --reps 9 --steps 8 --seconds 240 --out "$OUT/r54-aten.json" 2>&1 | grep -v "torch.__trace" \
  > "$OUT/r54-aten.txt"; tail -25 "$OUT/r54-aten.txt"
