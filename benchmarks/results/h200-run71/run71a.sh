#!/usr/bin/env bash
# Run 71a (session 51): this session's sets_cuda.py, then run70b.sh (run 70's feeds_cuda.py,
# never run on a GPU, and CUDA test files until CALL_S runs out).
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
timeout 200 python benchmarks/results/h200-run71/sets_cuda.py 2>&1 | grep -v "torch.__trace" \
  | tee "$OUT/${R:-r71a}-sets.txt" | grep -vE "^\s|Warning|warn" | tail -12
R=${R:-r71a} bash benchmarks/results/h200-run70/run70b.sh
