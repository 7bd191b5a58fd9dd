"""Where a step's time goes: torch.profiler over a few steps of one benchmark case.

    python benchmarks/profile_step.py launch-bound sequential fxslots [kernels.json]
    python benchmarks/profile_step.py --host launch-bound sequential fxslots [steps]

With a JSON path, also writes each kernel's device microseconds per step (and the step's
wall and device-busy time), for diffing two backends kernel by kernel (``--diff a b``).
``--host``: the Python functions a step spends its host time in (cProfile over ``steps``
steps, no synchronization inside), for a host-bound model. ``--components``: microseconds per
call of each part of fxslots' forward and backward wrappers (host_overhead.py's table, here
with real graphs on the GPU), and of AOTAutograd's handling of the saved tensors. ``--lines``:
the same wrappers line by line (needs line_profiler).
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paired  # noqa: E402


def _warm_case(model_name: str, schedule: str, backend: str):
    """The case compiled and warmed up: (its step, the compiled model, variants per pass)."""
    run, f, work, _ = paired.build_case(model_name, schedule, backend)
    n = len(work.seqs)
    for k in range(3 * n):
        run(f, k)
    torch.cuda.synchronize()
    return run, f, n


def host(model_name: str, schedule: str, backend: str, steps: str = "200") -> None:
    """Host microseconds per step, then where they go, function by function."""
    run, f, _ = _warm_case(model_name, schedule, backend)
    k = int(steps)
    t0 = time.perf_counter()
    for i in range(k):
        run(f, i)
    us = (time.perf_counter() - t0) / k * 1e6
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for i in range(k):
        run(f, i)
    prof.disable()
    torch.cuda.synchronize()
    print(f"{model_name} {schedule} {backend}: {us:.0f} host us/step unprofiled (no sync)")
    stats = pstats.Stats(prof)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(40)


def components(model_name: str, schedule: str, steps: str = "300") -> None:
    """host_overhead.py's per-part table for fxslots on the GPU, with real replays."""
    import host_overhead

    totals = host_overhead._timed_components()
    run, f, _ = _warm_case(model_name, schedule, "fxslots")
    for acc in totals.values():
        acc[:] = [0.0, 0]
    for i in range(int(steps)):
        run(f, i)
    torch.cuda.synchronize()
    print(f"{'component':<28} | us/call")
    for label, (sec, calls) in totals.items():
        print(f"{label:<28} | {sec / calls * 1e6 if calls else 0.0:7.1f}")


LINES = ("fxslots.runtime.variant:Variant.forward", "fxslots.runtime.variant:Variant.backward",
         "fxslots.runtime.variant:Variant._note_node", "fxslots._torch.autograd:calling_node",
         "fxslots.runtime.ring:SlotRing.acquire", "fxslots.runtime.ring:SlotRing._free_slot",
         "fxslots.runtime.cudagraphs.executor:GraphExecutor.forward",
         "fxslots.runtime.cudagraphs.executor:GraphExecutor.backward",
         "fxslots.runtime.cudagraphs.executor:GraphExecutor._replay",
         "fxslots.runtime.cudagraphs.executor:GraphExecutor._deliver_into",
         "fxslots.runtime.cudagraphs.outputs:Captured.results",
         "fxslots.runtime.cudagraphs.outputs:Captured.moved",
         "fxslots.runtime.cudagraphs.delivery:Tangents.stage",
         "fxslots.runtime.cudagraphs.delivery:Deliveries.target",
         "fxslots.runtime.cudagraphs.delivery:forward_buffer",
         "fxslots.runtime.cudagraphs.staging:copy_staged",
         "fxslots.runtime.layout:make_views")


def lines(model_name: str, schedule: str, steps: str = "300") -> None:
    """fxslots' per-call wrappers line by line (line_profiler), with real replays."""
    import importlib

    from line_profiler import LineProfiler

    prof = LineProfiler()
    for spec in LINES:
        mod, _, path = spec.partition(":")
        obj = importlib.import_module(mod)
        for part in path.split("."):
            obj = getattr(obj, part)
        prof.add_function(obj)
    run, f, _ = _warm_case(model_name, schedule, "fxslots")
    prof.enable()
    for i in range(int(steps)):
        run(f, i)
    torch.cuda.synchronize()
    prof.disable()
    prof.print_stats(output_unit=1e-6, stripzeros=True)


def main(model_name: str, schedule: str, backend: str, out: str | None = None) -> None:
    run, f, n = _warm_case(model_name, schedule, backend)
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=acts) as prof:
        for i in range(4):
            run(f, n - 1 + i * n)  # the largest variant
        torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - t0) / 4 * 1e3
    if out:
        kernels = {e.key: e.self_device_time_total / 4 for e in prof.key_averages()
                   if e.self_device_time_total > 0 and e.device_type.name == "CUDA"}
        with open(out, "w") as fh:
            json.dump({"case": [model_name, schedule, backend], "wall_ms_profiled": wall_ms,
                       "device_us_per_step": sum(kernels.values()), "kernels": kernels}, fh,
                      indent=1)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=12))


def _load(path: str) -> dict:
    with open(path) as fh:
        return json.load(fh)


def diff(a: str, b: str, rows: int = 20) -> None:
    """The kernels whose device time per step differs most between two JSON files."""
    ka, kb = (_load(p) for p in (a, b))
    print(f"{a}: {ka['device_us_per_step']:.0f} us device/step; "
          f"{b}: {kb['device_us_per_step']:.0f} us device/step")
    names = set(ka["kernels"]) | set(kb["kernels"])
    d = sorted(names, key=lambda k: -abs(kb["kernels"].get(k, 0) - ka["kernels"].get(k, 0)))
    for k in d[:rows]:
        x, y = ka["kernels"].get(k, 0.0), kb["kernels"].get(k, 0.0)
        print(f"{y - x:+9.1f} us  {x:9.1f} -> {y:9.1f}  {k[:110]}")


if __name__ == "__main__":
    if sys.argv[1] == "--diff":
        diff(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "--host":
        host(*sys.argv[2:6])
    elif sys.argv[1] == "--lines":
        lines(*sys.argv[2:5])
    elif sys.argv[1] == "--components":
        components(*sys.argv[2:5])
    else:
        main(*sys.argv[1:5])
