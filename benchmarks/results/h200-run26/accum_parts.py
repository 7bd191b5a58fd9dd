"""Run 25d: where accum's extra host time over sequential goes on the launch-bound model, on
the GPU: the loop's zero_grad(set_to_none=False) (24 zero_ launches) and fxslots' check of the
.grad buffers (Variant._grad_buffers), host microseconds per call, 300 steps."""
import os, sys, time
sys.path.insert(0, "benchmarks")
import torch
import bench_plan, bench_work
from fxslots.runtime import variant

acc = {"zero_grad": [0.0, 0], "grad check": [0.0, 0]}
def timed(fn, key):
    def run(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            acc[key][0] += time.perf_counter() - t0
            acc[key][1] += 1
    return run
work = bench_work.Workload(bench_plan.MODELS["launch-bound"], "cuda")
f = bench_work.compile_case(work.model, "fxslots", {"slots": 1}, None)
step = bench_work.make_step("accum", work, lambda: None)
run = bench_work.with_zero_grad(step, work.model, "accum")
for k in range(12):
    run(f, k)
torch.cuda.synchronize()
variant.Variant._grad_buffers = timed(variant.Variant._grad_buffers, "grad check")
work.model.zero_grad = timed(work.model.zero_grad, "zero_grad")
t0 = time.perf_counter()
for k in range(300):
    run(f, k)
us = (time.perf_counter() - t0) / 300 * 1e6
torch.cuda.synchronize()
print(f"accum host us/step (no sync, timers on): {us:.0f}")
for key, (s, n) in acc.items():
    print(f"  {key}: {s / n * 1e6:.1f} us/call over {n} calls")
