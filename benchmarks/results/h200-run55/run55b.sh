# Run 55b: llama-large at one shape, ATen kernels: the graph pool and reserved memory against
# eager's.
source benchmarks/gpu_setup.sh
for b in fxslots eager; do
  timeout 150 python3 benchmarks/footprint.py --model llama-large --schedule sequential \
    --backend $b --options '{"slots": 1}' --steps 3 --seq 2048 > "$OUT/r55b-footprint-$b.txt" 2>&1
  tail -6 "$OUT/r55b-footprint-$b.txt"
done
