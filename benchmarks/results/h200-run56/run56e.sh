# Run 56e: one room for all of a model's variants (room.room_for over the region's live
# variants); the CUDA tests after the helpers were shared; the room-never-made CUDA mutant;
# reserved against eager on the uniform sequential schedules over all variants (issue 10's
# footprint target: llama-large 1024/2048, heavy 512-2048).
source benchmarks/gpu_setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader
for m in "llama-large 6" "heavy 10"; do
  set -- $m
  for b in fxslots eager; do
    timeout 150 python3 benchmarks/footprint.py --model $1 --schedule sequential --backend $b \
      --options '{"slots": 1}' --steps $2 2>&1 | grep -E "reserved [0-9]|allocated at its most|^graph " \
      >> "$OUT/r56e-footprint.txt"
  done
done
cat "$OUT/r56e-footprint.txt"
timeout 120 python3 -m pytest -q -m cuda tests/test_borrow.py tests/test_share.py -s \
  -p no:cacheprovider -o log_level=WARNING --timeout 90 -rfE --tb=short 2>&1 \
  | grep -v "torch.__trace" > "$OUT/r56e-tests.txt"
grep -E "graph pool|passed|failed|^FAILED|^E  " "$OUT/r56e-tests.txt"
cuda_tests r56e 120 tests/test_cuda.py
timeout 150 python3 tools/mutation/run.py --suite cuda --no-baseline --markdown \
  --only room-never-made > "$OUT/r56e-mutant.txt" 2>&1; grep -E "^\| \`|killed|survived" "$OUT/r56e-mutant.txt"
