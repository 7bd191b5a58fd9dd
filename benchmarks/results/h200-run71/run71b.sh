#!/usr/bin/env bash
# Run 71b (session 51): on an H200, issue 13's table (run63a.sh: the whole call); on any other
# card, run71a.sh (sets_cuda.py, feeds_cuda.py, CUDA test files).
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $name"
if [[ "$name" == *H200* ]]; then
  R=${R:-r71b} bash benchmarks/results/h200-run63/run63a.sh
else
  R=${R:-r71b} bash benchmarks/results/h200-run71/run71a.sh
fi
