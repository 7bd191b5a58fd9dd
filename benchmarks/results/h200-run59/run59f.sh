#!/usr/bin/env bash
# Run 59f (session 39): the last device time. On an H200, run 59a again (issue 10 names that
# card: run59e.sh); on an H100, run59d.sh (llama-large, Inductor kernels against
# torch.compile default and reduce-overhead, paired).
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bash benchmarks/results/h200-run59/run59e.sh
else
  bash benchmarks/results/h200-run59/run59d.sh
fi
