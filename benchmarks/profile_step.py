"""Where a step's time goes: torch.profiler over a few steps of one benchmark case.

    python benchmarks/profile_step.py launch-bound sequential fxslots
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def main(model_name: str, schedule: str, backend: str) -> None:
    cfg = bench.MODELS[model_name]
    m = bench.build(cfg)
    g = torch.Generator(device="cuda").manual_seed(0)
    xs = {s: torch.randn(cfg["B"], s, cfg["H"], device="cuda", dtype=torch.bfloat16, generator=g)
          for s in bench.SEQS}
    mark = (torch.compiler.cudagraph_mark_step_begin if backend == "reduce-overhead"
            else (lambda: None))
    if backend == "fxslots":
        f = torch.compile(m, backend="fxslots", options={"slots": bench.SLOTS[schedule]})
    elif backend == "reduce-overhead":
        f = torch.compile(m, mode="reduce-overhead")
    else:
        f = m
    step = bench.step_fn(schedule, xs, mark)
    for _ in range(3):
        for s in bench.SEQS:
            step(f, s)
            m.zero_grad()
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(4):
            step(f, 2048)
            m.zero_grad()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=12))


if __name__ == "__main__":
    main(*sys.argv[1:4])
