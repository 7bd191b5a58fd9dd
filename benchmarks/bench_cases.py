"""One case of benchmarks/bench.py, in its own process: ``child(spec, row_path, log_path)``.

The row is written to ``row_path`` after each stage (compile+warm-up, timing, checks), so a case
killed by its timeout keeps what it measured; an exception becomes the row's ``error``, named by
the stage it happened in. One runner per part: speed, host, warmup, offload, compile.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
import traceback
from typing import Any, Callable

import torch
import torch._dynamo  # noqa: F401 - imported here so the fork server preloads it

from bench_trace import copy_overlap_file
from bench_work import (Memory, Workload, compile_case, error_text, fxslots_counter,
                        fxslots_figures, grad_error, make_step, mark_for, spread,
                        steps_per_pass, sync, timed_reps, with_zero_grad)

with contextlib.suppress(ImportError):
    import fxslots  # noqa: F401 - preloaded too

Save = Callable[[], None]


def child(spec: dict, row_path: str, log_path: str) -> None:
    """The entry point of a case's process."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)  # the parent's timeout kills the group (compile workers too)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    if spec["smoke"]:
        torch.set_num_threads(1)  # tiny tensors; other people share this machine's cores
    row = {k: spec[k] for k in ("part", "model", "schedule", "case")}
    row.update(device=_device_name(spec["device"]), torch=torch.__version__, error=None,
               stage="start")
    if spec["part"] in ("warmup", "compile"):
        row["cold_caches"] = _cold_caches()

    def save() -> None:
        with open(row_path + ".tmp", "w") as fh:
            json.dump(row, fh)
        os.replace(row_path + ".tmp", row_path)

    try:
        RUNNERS[spec["part"]](spec, row, save)
    except BaseException as e:  # noqa: BLE001 - a failing case is a row, not a crash
        traceback.print_exc()
        row["error"] = f"[{row['stage']}] {error_text(e)}"
    else:
        row["stage"] = "done"
    row["done"] = True
    save()
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: CUDA graphs and pools die with the process


def _cold_caches() -> str:
    """Fresh, empty compile caches for this case: Inductor's FX graph and AOTAutograd caches
    (under TORCHINDUCTOR_CACHE_DIR) and Triton's kernels persist on disk across processes, so
    a reduce-overhead case after the speed part's would time cache hits, not compiles."""
    root = tempfile.mkdtemp(prefix="fxslots-bench-cache-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(root, "inductor")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(root, "triton")
    return root


def _device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    return device


def _stage(row: dict, name: str, save: Save) -> None:
    row["stage"] = name
    save()


def run_speed(spec: dict, row: dict, save: Save) -> None:
    st, schedule, backend = spec["settings"], spec["schedule"], spec["backend"]
    work = Workload(spec["cfg"], spec["device"], microbatches=4 if schedule == "1f1b" else 1)
    mem = Memory(work.device)
    f = compile_case(work.model, backend, spec["options"], spec["dynamic"])
    step = make_step(schedule, work, mark_for(backend))
    run = with_zero_grad(step, work.model, schedule)
    _stage(row, "compile+warm-up", save)
    row["warm_s"] = _warm(run, f, work, st["warm_passes"] * steps_per_pass(schedule, work))
    row["peak_warm_gib"] = mem.peak_gib(reset=True)
    captures = fxslots_counter("captures") if backend == "fxslots" else 0
    _stage(row, "timing", save)
    row.update(spread(timed_reps(run, f, work.device, st["reps"], st["steps"]), "ms_per_step"))
    _memory(row, mem)
    if backend == "fxslots":
        row.update(fxslots_figures())
        row["captures_in_timed_steps"] = row["captures"] - captures
    _stage(row, "grad check", save)
    row["max_grad_err"] = grad_error(work, f, step)


def _warm(run: Callable, f: Any, work: Workload, steps: int) -> float:
    """Seconds for the first ``steps`` steps: compiles, warm-ups and captures."""
    t0 = time.perf_counter()
    for k in range(steps):
        run(f, k)
    sync(work.device)
    return time.perf_counter() - t0


def _memory(row: dict, mem: Memory) -> None:
    row["peak_steady_gib"] = mem.peak_gib()
    row["peak_alloc_gib"] = (None if row["peak_steady_gib"] is None else
                             max(row["peak_warm_gib"] or 0.0, row["peak_steady_gib"]))
    row["reserved_gib"] = mem.reserved_gib()
    row.update(mem.reserved_split())
    if row["peak_steady_gib"] is not None:
        # A replay writes its temporaries into the graph pool without allocating: the steady
        # peak of allocated bytes misses them (offload="all" looked 0.24x "none" in run 22d
        # and held more). What the pool holds beyond its live blocks is counted as in use.
        unallocated = row["graph_pools_gib"] - row["graph_pools_alloc_gib"]
        row["in_use_gib"] = max(row["peak_warm_gib"] or 0.0,
                                row["peak_steady_gib"] + unallocated)


def run_host(spec: dict, row: dict, save: Save) -> None:
    """Host microseconds per forward call and per backward call, without synchronizing, and
    what the same steps take with the GPU in the picture (wall) and alone (GPU)."""
    st, backend = spec["settings"], spec["backend"]
    work = Workload(spec["cfg"], spec["device"], seqs=spec["cfg"]["seqs"][:1])
    args = work.batches[work.seqs[0]][0]
    grad_out = None if spec["cfg"]["kind"] == "llama" else torch.randn_like(args[0])
    f = compile_case(work.model, backend, spec["options"], spec["dynamic"])
    call = _host_call(f, args, grad_out, work.model, mark_for(backend))
    _stage(row, "compile+warm-up", save)
    for _ in range(10):
        call([0.0, 0.0])
    sync(work.device)
    _stage(row, "timing", save)
    reps = [_host_rep(call, st["host_calls"], work.device) for _ in range(st["reps"])]
    for i, key in enumerate(("host_fwd_us", "host_bwd_us", "host_step_us", "wall_step_us")):
        row.update(spread([r[i] for r in reps], key))
    row["calls_per_rep"] = st["host_calls"]
    if work.device.type == "cuda":
        row.update(spread([_gpu_step_us(call, row["host_step_us"]) for _ in range(st["reps"])],
                          "gpu_step_us"))
        row["bound"] = "host" if row["host_step_us"] > row["gpu_step_us"] else "gpu"
    if backend == "fxslots":
        row["captures"] = fxslots_counter("captures")


def _host_call(f, args, grad_out, model, mark) -> Callable[[list], None]:
    """One forward call and one backward call; adds their host seconds to ``acc``."""
    def call(acc: list) -> None:
        mark()
        t0 = time.perf_counter()
        out = f(*args)
        t1 = time.perf_counter()
        out.backward(grad_out)
        acc[0] += t1 - t0
        acc[1] += time.perf_counter() - t1
        model.zero_grad(set_to_none=True)

    return call


def _host_rep(call: Callable, n: int, device: torch.device) -> tuple[float, ...]:
    """(forward us/call, backward us/call, us/step without sync, us/step with sync around)."""
    acc = [0.0, 0.0]
    sync(device)
    t0 = time.perf_counter()
    for _ in range(n):
        call(acc)
    host = time.perf_counter() - t0
    sync(device)
    wall = time.perf_counter() - t0
    return acc[0] / n * 1e6, acc[1] / n * 1e6, host / n * 1e6, wall / n * 1e6


def _gpu_step_us(call: Callable, host_us: float, n: int = 2) -> float:
    """GPU microseconds per step, the host out of the picture: ``n`` steps queued behind a GPU
    sleep longer than it takes to enqueue them, timed by CUDA events around them."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(int(_cycles_per_us() * (host_us * n * 3 + 2000)))
    start.record()
    for _ in range(n):
        call([0.0, 0.0])
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / n


def _cycles_per_us() -> float:
    """GPU clock cycles of ``torch.cuda._sleep`` per microsecond (the second of two tries)."""
    for _ in range(2):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        torch.cuda._sleep(1_000_000)
        b.record()
        torch.cuda.synchronize()
    return 1_000_000 / (a.elapsed_time(b) * 1e3)


def run_warmup(spec: dict, row: dict, save: Save) -> None:
    """Compile and capture every variant (passes over them, or fxslots.prepare), then time
    steps over all of them; fxslots counts captures during the timed steps."""
    st, backend = spec["settings"], spec["backend"]
    work = Workload(spec["cfg"], spec["device"], seqs=spec["seqs"])
    mem = Memory(work.device)
    f = compile_case(work.model, backend, spec["options"], spec["dynamic"])
    run = with_zero_grad(make_step("sequential", work, mark_for(backend)), work.model,
                         "sequential")
    _stage(row, "compile+warm-up", save)
    t0 = time.perf_counter()
    if spec["prepare"]:
        import fxslots

        row["prepare"] = str(fxslots.prepare(f, [work.batches[s][0] for s in work.seqs]))
    else:
        row["pass_s"] = [_warm(run, f, work, len(work.seqs)) for _ in range(st["warm_passes"])]
    row["warm_s"] = time.perf_counter() - t0
    row["peak_warm_gib"] = mem.peak_gib(reset=True)
    counts = _fx_counts(backend)
    _stage(row, "timing", save)
    row.update(spread(timed_reps(run, f, work.device, st["warmup_reps"], len(work.seqs)),
                      "ms_per_step"))
    _memory(row, mem)
    if backend == "fxslots":
        now = _fx_counts(backend)
        row["captures_in_timed_steps"] = now[0] - counts[0]
        row["compiles_in_timed_steps"] = now[1] - counts[1]
        row.update(fxslots_figures())


def _fx_counts(backend: str) -> tuple[int, int]:
    if backend != "fxslots":
        return 0, 0
    return fxslots_counter("captures"), fxslots_counter("compiles")


def run_link(spec: dict, row: dict, save: Save) -> None:
    """Pinned host<->device bandwidth: a 256 MiB copy each way, best and median of 5."""
    n = 256 * 2**20
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    for name, dst, src in (("h2d", dev, host), ("d2h", host, dev)):
        times = []
        for _ in range(6):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dst.copy_(src, non_blocking=True)
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        gbps = sorted(n / t / 1e9 for t in times[1:])  # the first copy warms up
        row[f"{name}_gbps"] = gbps[len(gbps) // 2]
        row[f"{name}_gbps_max"] = gbps[-1]
    row["copy_bytes"] = n


def run_offload(spec: dict, row: dict, save: Save) -> None:
    st, backend = spec["settings"], spec["backend"]
    work = Workload(spec["cfg"], spec["device"], seqs=(spec["seq"],))
    mem = Memory(work.device)
    options = {"slots": 1, "offload": spec.get("offload_value", "none")}
    if spec.get("window") is not None:
        options["offload_window"] = spec["window"]
    f = compile_case(work.model, backend, options, None)
    pin = work.device.type == "cuda"  # pinned memory needs CUDA; the CPU smoke run copies
    ctx = ((lambda: torch.autograd.graph.save_on_cpu(pin_memory=pin))
           if backend == "save_on_cpu" else contextlib.nullcontext)
    plain = make_step("sequential", work, lambda: None)

    def step(g: Any, k: int) -> None:
        with ctx():
            plain(g, k)

    run = with_zero_grad(step, work.model, "sequential")
    _stage(row, "compile+warm-up", save)
    row["warm_s"] = _warm(run, f, work, 3)
    row["peak_warm_gib"] = mem.peak_gib(reset=True)
    _stage(row, "timing", save)
    row.update(spread(timed_reps(run, f, work.device, st["offload_reps"], st["steps"]),
                      "ms_per_step"))
    _memory(row, mem)
    _offload_figures(row, work, backend)
    _stage(row, "profiler trace", save)
    row.update(_trace_copies(run, f, work.device))
    _stage(row, "grad check", save)
    row["max_grad_err"] = grad_error(work, f, step)


def _offload_figures(row: dict, work: Workload, backend: str) -> None:
    if backend == "fxslots":
        row.update(fxslots_figures())
        row["offloaded_bytes_per_step"] = row["offloaded_bytes_per_forward"]
    elif backend == "save_on_cpu":
        row["offloaded_bytes_per_step"] = _saved_bytes(work)
    else:
        row["offloaded_bytes_per_step"] = 0


def _saved_bytes(work: Workload) -> int:
    """Bytes that save_on_cpu copies to the host in one forward: every saved tensor."""
    total = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = work.loss(work.model, work.seqs[0])
    del loss
    work.model.zero_grad(set_to_none=True)
    return total[0]


def _trace_copies(run: Callable, f: Any, device: torch.device, steps: int = 2) -> dict:
    """From one profiler trace of ``steps`` steps: the fraction of host<->device copy time that
    overlaps kernels on other streams, and the bytes copied each way per step."""
    acts = [torch.profiler.ProfilerActivity.CUDA if device.type == "cuda" else
            torch.profiler.ProfilerActivity.CPU]  # CPU: no copies, the code path is checked
    with tempfile.TemporaryDirectory() as d:
        with torch.profiler.profile(activities=acts) as prof:
            for k in range(steps):
                run(f, k)
            sync(device)
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        ov = copy_overlap_file(path)
    out = {"copy_overlap_fraction": ov.pop("overlap_fraction")}
    for name, d in ov.items():
        out[f"trace_{name}_bytes_per_step"] = d["bytes"] // steps
        out[f"trace_{name}_us_per_step"] = d["copy_us"] / steps
        out[f"trace_{name}_overlap_us_per_step"] = d["overlap_us"] / steps
    return out


def run_compile(spec: dict, row: dict, save: Save) -> None:
    """Seconds of the first step (compile included), a steady step, and a second shape."""
    work = Workload(spec["cfg"], spec["device"])
    f = compile_case(work.model, spec["backend"], spec["options"], spec["dynamic"])
    run = with_zero_grad(make_step("sequential", work, lambda: None), work.model, "sequential")
    _stage(row, "first compile", save)
    row["first_step_s"] = _warm(run, f, work, 1)
    save()
    _stage(row, "steady steps", save)
    steady = min(_warm(run, f, work, 1) for _ in range(3))  # k=0 each time: the first shape
    row["steady_step_ms"] = steady * 1e3
    row["compile_s"] = row["first_step_s"] - steady
    if spec["second_shape"]:
        _stage(row, "second shape", save)
        row["second_shape_s"] = _timed_step(run, f, work, 1)
    if spec["backend"] == "fxslots":
        row["compiles"] = fxslots_counter("compiles")


def _timed_step(run: Callable, f: Any, work: Workload, k: int) -> float:
    t0 = time.perf_counter()
    run(f, k)
    sync(work.device)
    return time.perf_counter() - t0


RUNNERS = {"speed": run_speed, "host": run_host, "warmup": run_warmup, "compile": run_compile,
           "offload": lambda spec, row, save: (run_link if spec["model"] == "-" else
                                               run_offload)(spec, row, save)}
