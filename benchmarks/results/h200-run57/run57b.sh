# Run 57b (session 38): the footprint of both issue-10 models on the uniform sequential schedule
# over all their variants, fxslots (slots=1, the room and share on) against eager in one call,
# and llama-small at one shape with every segment listed (where its default pool's bytes above
# eager's come from).
source benchmarks/gpu_setup.sh
for model in llama-small heavy; do
  for backend in fxslots eager; do
    timeout 120 python3 benchmarks/footprint.py --model $model --schedule sequential \
      --backend $backend --options '{"slots": 1}' --steps 6 \
      > "$OUT/r57b-uniform-$model-$backend.txt" 2>&1
    grep -E "reserved [0-9]|^graph |^default " "$OUT/r57b-uniform-$model-$backend.txt"
  done
done
timeout 120 python3 benchmarks/footprint.py --model llama-small --schedule sequential \
  --backend fxslots --options '{"slots": 1}' --steps 4 --seq 512 > "$OUT/r57b-small-512.txt" 2>&1
grep -E "reserved [0-9]|^graph |^default " "$OUT/r57b-small-512.txt"
