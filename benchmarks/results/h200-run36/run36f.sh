#!/usr/bin/env bash
# H200 run 36f (torch 2.11): one saved tensor per arena for AOTAutograd (bec9ac0): does torch
# 2.11's AOTAutograd runtime take a forward that hands over fewer saved tensors? test_cuda, then
# test_graph_executor_cpu and test_runtime under torch 2.11 (the collapse tests among them),
# then the 16-variant steady step paired against reduce-overhead static (36e: 0.967x).
source benchmarks/gpu_setup.sh
cuda_tests r36f 150 tests/test_cuda.py
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_graph_executor_cpu.py \
  tests/test_runtime.py -o log_level=WARNING 2>&1 | grep -v "torch.__trace" \
  | tail -15 > "$OUT/r36f-cpu-tests-211.txt"
tail -1 "$OUT/r36f-cpu-tests-211.txt"
timeout 200 python3 benchmarks/paired.py launch-bound sequential \
  fxslots+dynamic=true,reduce-overhead+dynamic=false --warmup-seqs --reps 15 \
  --out "$OUT/paired-lb-warmup-seqs-f.json" 2>&1 \
  | grep -v "captured a CUDA graph\|^W1\|torch.__trace" | tail -6 | tee "$OUT/r36f-paired.txt"
