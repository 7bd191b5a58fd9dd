#!/usr/bin/env bash
# H200 run 29b: Inductor's and the delivering backward's CUDA tests (the prepared backward goes
# through both), then the offload part of the benchmark on both models: "all", auto and the
# half budget after merged joins (session 13) and the window mend.
source benchmarks/gpu_setup.sh
cuda_tests r29b 160 tests/test_inductor.py tests/test_deliver.py
timeout 300 python3 benchmarks/bench.py --parts offload --quick --models heavy,llama-small --budget-s 280 --out "$OUT/bench" \
  2>&1 | grep -v "captured a CUDA graph" | tee "$OUT/r29b-offload.txt" | tail -40
