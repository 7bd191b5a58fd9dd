# Run 56b: each benchmark model at one shape, slots=1, ATen kernels: the pool's segments with the
# room and share.py on and off (pools.py), then reserved memory against eager's (footprint.py).
source benchmarks/gpu_setup.sh
probe() {
  timeout 120 python3 benchmarks/results/h200-run56/pools.py "$@" 2>&1 \
    | grep -E "^capture|^\{|pool: a|Error|error" >> "$OUT/r56b-pools.txt"
}
for f in "room=0 share=0" "room=1 share=0" "room=0 share=1" "room=1 share=1"; do
  probe llama-large 2048 $f; probe llama-small 512 $f
done
probe heavy 2048 room=0; probe heavy 2048 room=1
grep "^{" "$OUT/r56b-pools.txt"
for m in "llama-small 512" "heavy 2048"; do
  set -- $m
  for b in fxslots eager; do
    timeout 120 python3 benchmarks/footprint.py --model $1 --schedule sequential --backend $b \
      --options '{"slots": 1}' --steps 3 --seq $2 > "$OUT/r56b-footprint-$1-$b.txt" 2>&1
    grep -E "reserved [0-9]|allocated at its most" "$OUT/r56b-footprint-$1-$b.txt"
  done
done
