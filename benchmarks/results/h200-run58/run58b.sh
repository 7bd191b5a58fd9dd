# Run 58b (session 38): the reliability suite on borrowing under symbolic shapes, and heavy's
# uniform footprint over 10 steps (its steady state: runs 57b and 58 ran 6), against eager.
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
cuda_tests r58b 240 tests/test_cuda_reliability.py
for backend in fxslots eager; do
  timeout 150 python3 benchmarks/footprint.py --model heavy --schedule sequential \
    --backend $backend --options '{"slots": 1}' --steps 10 --out /tmp/fp >> "$OUT/r58b-fp-heavy.txt" 2>&1
done
grep -E "reserved [0-9]|^graph |^default |make_room|allocated at its most" "$OUT/r58b-fp-heavy.txt"
