# Run 56c: the room sized by the backward a warm loop captures (pools.py: each graph's nodes'
# peak beside what the allocator held), then the CUDA tests of the room, share.py and borrow.py.
source benchmarks/gpu_setup.sh
probe() {
  timeout 120 python3 benchmarks/results/h200-run56/pools.py "$@" 2>&1 \
    | grep -E "^capture|^\{|pool: a|peaks|Error|error" >> "$OUT/r56c-pools.txt"
}
probe llama-large 2048 room=1 share=1; probe llama-small 512 room=1 share=1; probe heavy 2048 room=1
cat "$OUT/r56c-pools.txt"
timeout 200 python3 -m pytest -q -m cuda tests/test_pool_room.py tests/test_share.py \
  tests/test_borrow.py -s -p no:cacheprovider -o log_level=WARNING --timeout 150 -rfE \
  --tb=short 2>&1 | grep -v "torch.__trace" > "$OUT/r56c-tests.txt"
grep -E "room |graph pool|passed|failed|^FAILED|^ERROR|^E  " "$OUT/r56c-tests.txt"
