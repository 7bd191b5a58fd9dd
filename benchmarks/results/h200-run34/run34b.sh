#!/usr/bin/env bash
# H200 run 34b (torch 2.11): lasting buffers (arenas, output and staging buffers) allocated after
# the caching allocator gives back its free segments (ring.lasting). test_cuda (with the new
# allocator test) and test_deliver_forward's CUDA test; the mutant that skips the release, which
# that test must kill; footprint.py on heavy (seq 2048) and llama-small (seq 512), slots=1.
source benchmarks/gpu_setup.sh
cuda_tests r34b 200 tests/test_cuda.py tests/test_deliver_forward.py
timeout 200 python3 tools/mutation/run.py --suite cuda --no-baseline \
  --only lasting-buffer-in-a-cached-segment 2>&1 | tail -4 | tee "$OUT/r34b-mutant.txt"
for m in heavy llama-small; do
  s=$([ $m = heavy ] && echo 2048 || echo 512)
  for b in eager fxslots; do
    [ $m = heavy ] && [ $b = eager ] && continue  # run 34a: 2.283 GiB
    timeout 100 python3 benchmarks/footprint.py --model $m --schedule sequential --backend $b \
      --options '{"slots": 1}' --steps 4 --seq $s 2>&1 \
      | grep -v "captured a CUDA graph" > "$OUT/r34b-$m-$b.txt"; head -4 "$OUT/r34b-$m-$b.txt"
  done
done
