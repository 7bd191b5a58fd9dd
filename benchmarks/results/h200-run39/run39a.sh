#!/usr/bin/env bash
# H200 run 39a (torch 2.11), prepared in session 23 for the next session's first call: what
# session 23 changed without device time to run it. Seeds zeroed by fill_ (Inductor lowers it;
# 38d's zero_ made Inductor refuse the forward) and, with dropout, copied by fxslots::copy_into
# under Inductor; the attention bounds from 38a (fp32 4 MFLOP, half 2 GFLOP); the zoo and block
# tests now fail on an Inductor refusal. Then llama-large under kernels="inductor" against
# torch.compile default (38d's 41.4 ms was the refused forward; run 17 read 30.71 / 30.68).
source benchmarks/gpu_setup.sh
t0=$(date +%s)
FXSLOTS_KERNELS=inductor timeout 120 python3 -m pytest -q -p no:cacheprovider \
  tests/test_attention.py -k "under_cuda_graphs or seed" -rfE --tb=short -o log_level=WARNING \
  > "$OUT/r39a-test_attention-inductor-full.txt" 2>&1
echo "could-not-compile lines: $(grep -c 'could not compile' "$OUT/r39a-test_attention-inductor-full.txt")"
grep -v "torch.__trace" "$OUT/r39a-test_attention-inductor-full.txt" | tail -8; echo "t=$(( $(date +%s) - t0 ))"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_attention.py -rfE --tb=short \
  -o log_level=WARNING 2>&1 | grep -v "torch.__trace" | tail -8 | tee "$OUT/r39a-test_attention.txt"
echo "t=$(( $(date +%s) - t0 ))"
timeout 330 python3 benchmarks/bench.py --parts speed --models llama-large --schedules sequential \
  --cases eager,inductor,fxslots --fxslots-variants '[{"kernels": "inductor"}]' --reps 7 --steps 8 \
  --case-timeout-s 160 --out "$OUT/r39a" 2>&1 | grep -E "^\[speed|^\| llama" | tee "$OUT/r39a-bench.txt"
echo "t=$(( $(date +%s) - t0 ))"
