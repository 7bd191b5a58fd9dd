#!/usr/bin/env bash
# Run 69a (session 49): on an H200, issue 13's table (run63a.sh); on any other card, the CUDA
# test files session 48's later commits had not run (run67a.sh's loop; FILES, CALL_S).
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $name"
if [[ "$name" == *H200* ]]; then
  R=${R:-r69a} bash benchmarks/results/h200-run63/run63a.sh
else
  R=${R:-r69a} CALL_S=${CALL_S:-540} \
    FILES=${FILES:-"test_zoo test_cuda_checkpointed_rng test_cuda_memsets test_attention test_cuda"} \
    bash benchmarks/results/h200-run67/run67a.sh
fi
