#!/usr/bin/env bash
# H200 run 35a (torch 2.11): session 20's runtime changes (a held output's backward stages its
# tangents in the slot's other output buffer; prepare(hold_outputs=True); an uncaptured
# backward stages none) and session 19's ring.lasting settle flag, never run on the GPU:
# test_deliver_forward whole (CPU tests under 2.11, its two CUDA tests), test_cuda and
# test_deliver's CUDA tests; then fused_check.py (heavy: addmm_ count in the captured
# accumulating graph and the gradient error step by step, "graph" against "fused").
source benchmarks/gpu_setup.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_deliver_forward.py \
  -o log_level=WARNING 2>&1 | grep -v "torch.__trace" | tail -15 > "$OUT/r35a-test_deliver_forward.txt"
tail -3 "$OUT/r35a-test_deliver_forward.txt"
cuda_tests r35a 220 tests/test_cuda.py tests/test_deliver.py
timeout 150 python3 benchmarks/results/h200-run35/fused_check.py 2>&1 \
  | grep -v "captured a CUDA graph\|^W1\|torch.__trace" | tail -14 | tee "$OUT/r35a-fused-check.txt"
