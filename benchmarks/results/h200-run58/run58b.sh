# Run 58b (session 38): the reliability suite and the CUDA tests of borrow, share and the
# pool's room on borrowing under symbolic shapes and the room sized at every shape a variant
# has run at; heavy's uniform footprint over 10 steps (its steady state: runs 57b and 58 ran 6),
# against eager.
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
cuda_tests r58b 200 tests/test_cuda_reliability.py
cuda_tests_printing r58b 150 tests/test_borrow.py tests/test_share.py tests/test_pool_room.py
for backend in fxslots eager; do
  timeout 100 python3 benchmarks/footprint.py --model heavy --schedule sequential \
    --backend $backend --options '{"slots": 1}' --steps 10 --out /tmp/fp >> "$OUT/r58b-fp-heavy.txt" 2>&1
done
grep -E "reserved [0-9]|^graph |^default |make_room|allocated at its most" "$OUT/r58b-fp-heavy.txt"
