#!/usr/bin/env bash
# H200 run 33a (torch 2.11): session 17's last commits on the GPU (the accumulation check over
# region-level nodes, per-parameter-set noting): test_accumulate whole (its CPU tests under 2.11),
# test_cuda, test_cuda_reliability; then footprint.py with segment attribution on heavy (seq 2048)
# and llama-small (seq 512), eager against fxslots, slots=1.
source benchmarks/gpu_setup.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_accumulate.py \
  -o log_level=WARNING 2>&1 | grep -v "torch.__trace" | tail -15 > "$OUT/r33a-test_accumulate.txt"
tail -3 "$OUT/r33a-test_accumulate.txt"
cuda_tests r33a 200 tests/test_cuda.py tests/test_cuda_reliability.py
for m in heavy llama-small; do
  s=$([ $m = heavy ] && echo 2048 || echo 512)
  for b in eager fxslots; do
    timeout 100 python3 benchmarks/footprint.py --model $m --schedule sequential --backend $b \
      --options '{"slots": 1}' --steps 4 --seq $s --out "$OUT/footprint" 2>&1 \
      | grep -v "captured a CUDA graph" > "$OUT/r33a-$m-$b.txt"; head -4 "$OUT/r33a-$m-$b.txt"
  done
done
