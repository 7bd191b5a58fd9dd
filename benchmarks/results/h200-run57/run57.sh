# Run 57 (prepared in session 37, not yet run; about 6 min on any card): what session 37 left
# unverified on a GPU.
# 1. The CUDA room test as fixed after run 56e (it prints the room and the pool's segments),
#    with test_borrow's and test_share's CUDA tests; explain()'s pool section on CUDA.
# 2. The room-never-made CUDA mutant (56e's "killed" showed nothing: the test failed unmutated).
# 3. llama-large over both variants: the graph pool's segment sizes (56e printed only 1.988 GiB
#    in 2 segments: a ~2034 MiB room, or the 1034 MiB room and a 1000 MiB block beside it?).
source benchmarks/gpu_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cuda_tests_printing r57 200 tests/test_cuda.py tests/test_borrow.py tests/test_share.py
python3 - <<'PY' 2>&1 | tail -2 | tee "$OUT/r57-explain.txt"
import torch, fxslots
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                        torch.nn.Linear(4096, 1024)).cuda()
print(str(fxslots.explain(m, torch.randn(4096, 1024, device="cuda"))).splitlines()[-2:])
PY
timeout 150 python3 tools/mutation/run.py --suite cuda --no-baseline --markdown \
  --only room-never-made > "$OUT/r57-mutant.txt" 2>&1; grep -E "^\| \`|killed|survived" "$OUT/r57-mutant.txt"
timeout 150 python3 benchmarks/footprint.py --model llama-large --schedule sequential \
  --backend fxslots --options '{"slots": 1}' --steps 6 > "$OUT/r57-footprint.txt" 2>&1
grep -E "reserved [0-9]|^graph | graph " "$OUT/r57-footprint.txt"
# 4. The option's A/B in one call: pool_room off against on, llama-large at one shape.
for room in true false; do
  timeout 120 python3 benchmarks/footprint.py --model llama-large --schedule sequential \
    --backend fxslots --options "{\"slots\": 1, \"pool_room\": $room}" --steps 3 --seq 2048 \
    2>&1 | grep -E "reserved [0-9]|^graph " | sed "s/^/pool_room=$room: /" >> "$OUT/r57-room-ab.txt"
done
cat "$OUT/r57-room-ab.txt"
