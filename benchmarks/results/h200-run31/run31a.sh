#!/usr/bin/env bash
# H200 run 31a: the forward writes its large outputs into its slot's output buffer (ATen
# kernels; grads.deliver_forward). The CUDA suites that run forwards and delivering graphs;
# what each capture holds in the shared pool (heavy, llama-small); reserved memory with and
# without the cached segments released before each capture (release_ab.py).
source benchmarks/gpu_setup.sh
cuda_tests r31a 150 tests/test_deliver_forward.py tests/test_deliver.py tests/test_cuda.py tests/test_cuda_reliability.py tests/test_borrow.py tests/test_overlay.py
for m in heavy llama-small; do
  s=$([ $m = heavy ] && echo 2048 || echo 512)
  timeout 90 python3 benchmarks/results/h200-run30/capture_pools.py $m sequential '{"slots": 1}' $s 2>&1 \
    | grep -v "captured a CUDA graph" | tee "$OUT/r31a-pools-$m.txt" | grep -E "capture|segments"
done
for m in heavy llama-small; do
  s=$([ $m = heavy ] && echo 2048 || echo 512)
  for mode in eager release keep; do
    timeout 100 python3 benchmarks/results/h200-run31/release_ab.py $m $s $mode 2>&1 | grep -v "captured a CUDA graph" | tail -1
  done
done | tee "$OUT/r31a-release-ab.txt"
