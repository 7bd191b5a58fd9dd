"""Where a step's time goes: torch.profiler over a few steps of one benchmark case.

    python benchmarks/profile_step.py launch-bound sequential fxslots
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_plan  # noqa: E402
import bench_work  # noqa: E402


def main(model_name: str, schedule: str, backend: str) -> None:
    work = bench_work.Workload(bench_plan.MODELS[model_name], "cuda",
                               microbatches=4 if schedule == "1f1b" else 1)
    options = {"slots": bench_plan.slots_for(schedule, len(work.seqs))}
    f = bench_work.compile_case(work.model, backend, options, None)
    step = bench_work.make_step(schedule, work, bench_work.mark_for(backend))
    run = bench_work.with_zero_grad(step, work.model, schedule)
    n = len(work.seqs)
    for k in range(3 * n):
        run(f, k)
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for i in range(4):
            run(f, n - 1 + i * n)  # the largest variant
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=12))


if __name__ == "__main__":
    main(*sys.argv[1:4])
