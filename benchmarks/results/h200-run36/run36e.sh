#!/usr/bin/env bash
# H200 run 36e (torch 2.11): the session's final runtime (the review's fixes, CaptureKey a
# named tuple): test_cuda, test_deliver_forward's and test_graph_executor's CPU tests under
# torch 2.11 with the CUDA tests of the first; then the 16-variant steady step paired against
# reduce-overhead static once more (36b: 0.963x).
source benchmarks/gpu_setup.sh
cuda_tests r36e 150 tests/test_cuda.py
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_deliver_forward.py \
  tests/test_graph_executor_cpu.py -o log_level=WARNING 2>&1 | grep -v "torch.__trace" \
  | tail -15 > "$OUT/r36e-cpu-tests-211.txt"
tail -1 "$OUT/r36e-cpu-tests-211.txt"
timeout 300 python3 benchmarks/paired.py launch-bound sequential \
  fxslots+dynamic=true,reduce-overhead+dynamic=false --warmup-seqs --reps 21 \
  --out "$OUT/paired-lb-warmup-seqs-e.json" 2>&1 \
  | grep -v "captured a CUDA graph\|^W1\|torch.__trace" | tail -6 | tee "$OUT/r36e-paired.txt"
