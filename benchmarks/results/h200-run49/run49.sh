#!/usr/bin/env bash
# Run 49 (torch 2.11): do memset nodes wait for host-link copies? copy_contention.py's small
# chain with a 4-byte driver memset (a memset node) before each op, against a fill kernel in its
# place, beside 40 MiB of side-stream copies each way; then run 48b's device-time split on
# llama-small with cuDNN's SDPA (a memset node per attention kernel) switched off.
source benchmarks/gpu_setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/r49-gpu.txt"
timeout 200 python3 benchmarks/copy_contention.py --reps 9 --out "$OUT/r49-contention.json" \
  2>&1 | tee "$OUT/r49-contention.txt"
mkdir -p "$OUT/nocudnn"
NO_CUDNN_SDP=1 timeout 300 python3 benchmarks/results/h200-run48/launch_or_device.py \
  "$OUT/nocudnn" none auto 2>&1 | grep -v "captured a CUDA graph" | tail -20 \
  | tee "$OUT/r49-nocudnn.txt"
