# Run 58 (session 38): borrowing under symbolic shapes. Run 57c found llama-large's uniform
# schedule capturing its dynamic variant's delivering backward (2000 MiB of pool) instead of the
# borrowing one (1000 MiB): a symbolic plan kept every temporary in the pool. Now it borrows.
# 1. The CUDA tests of borrow (with the new dynamic head), share, pool room, and test_cuda.
# 2. Which graphs llama-large's uniform loop captures, and the room (captured.py, run 57c's).
# 3. Footprint on the uniform sequential schedule, fxslots (slots=1) against eager in one call,
#    of llama-large, llama-small and heavy (run 57: 9.848 / 0.848 / 2.162 GiB).
# 4. Speed: llama-large sequential, fxslots against eager, paired.
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cuda_tests_printing r58 240 tests/test_borrow.py tests/test_share.py tests/test_pool_room.py \
  tests/test_cuda.py
grep -E "dynamic head" "$OUT/r58-tests.txt"
timeout 150 python3 benchmarks/results/h200-run57/captured.py llama-large 2>&1 | grep -v Warn \
  > "$OUT/r58-captured.txt"; grep -E "^capture|arena" "$OUT/r58-captured.txt"
for model in llama-large llama-small heavy; do
  for backend in fxslots eager; do
    timeout 120 python3 benchmarks/footprint.py --model $model --schedule sequential \
      --backend $backend --options '{"slots": 1}' --steps 6 --out /tmp/fp >> "$OUT/r58-fp-$model.txt" 2>&1
  done
  grep -E "reserved [0-9]|^graph |^default |make_room" "$OUT/r58-fp-$model.txt"
done
timeout 150 python3 benchmarks/paired.py llama-large sequential fxslots,eager --reps 7 --steps 6 \
  --seconds 110 --out "$OUT/r58-paired.json" > "$OUT/r58-paired.txt" 2>&1; tail -8 "$OUT/r58-paired.txt"
