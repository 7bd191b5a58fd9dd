# Run 56d: the room sized by the forward that delivers its outputs into the slot's output
# buffer too (heavy's 64 MiB output had made 56c's room 98 MiB against 32 without it); each
# model's reserved memory against eager's at one shape; the CUDA suites.
source benchmarks/gpu_setup.sh
probe() {
  timeout 120 python3 benchmarks/results/h200-run56/pools.py "$@" 2>&1 \
    | grep -E "^capture|^\{|pool: a|peaks|Error|error" >> "$OUT/r56d-pools.txt"
}
probe heavy 2048 room=1; probe llama-small 512 room=1 share=1; probe llama-large 2048 room=1 share=1
grep -E "peaks|^\{" "$OUT/r56d-pools.txt"
for m in "llama-large 2048" "llama-small 512" "heavy 2048"; do
  set -- $m
  for b in fxslots eager; do
    timeout 120 python3 benchmarks/footprint.py --model $1 --schedule sequential --backend $b \
      --options '{"slots": 1}' --steps 3 --seq $2 2>&1 | grep -E "reserved [0-9]|allocated at its most" \
      >> "$OUT/r56d-footprint.txt"
  done
done
cat "$OUT/r56d-footprint.txt"
timeout 100 python3 -m pytest -q -m cuda tests/test_pool_room.py tests/test_share.py \
  tests/test_borrow.py -s -p no:cacheprovider -o log_level=WARNING --timeout 90 -rfE \
  --tb=short 2>&1 | grep -v "torch.__trace" > "$OUT/r56d-tests.txt"
grep -E "room |graph pool|passed|failed|^FAILED|^ERROR|^E  " "$OUT/r56d-tests.txt"
cuda_tests r56d 150 tests/test_cuda.py tests/test_cuda_reliability.py
