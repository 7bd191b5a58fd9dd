#!/usr/bin/env bash
# H200 run 36a (torch 2.11): session 20's last runtime change (_grad_buffers asks
# accumulating_grads first), never run on the GPU: test_accumulate and test_cuda. Then where the
# launch-bound model's host time per call goes: fxslots' parts with real replays
# (profile_step.py --components), and cProfile of a step for fxslots and reduce-overhead.
source benchmarks/gpu_setup.sh
cuda_tests r36a 150 tests/test_accumulate.py tests/test_cuda.py
timeout 90 python3 benchmarks/profile_step.py --components launch-bound sequential 400 2>&1 \
  | grep -v "captured a CUDA graph\|^W1\|torch.__trace" | tail -20 | tee "$OUT/r36a-components.txt"
for b in fxslots reduce-overhead; do
  timeout 90 python3 benchmarks/profile_step.py --host launch-bound sequential $b 300 2>&1 \
    | grep -v "captured a CUDA graph\|^W1\|torch.__trace" > "$OUT/r36a-host-$b.txt"
  head -60 "$OUT/r36a-host-$b.txt" | grep "host us/step"
done
