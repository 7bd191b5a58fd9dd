"""Where the GPU time of a training step goes, kernel by kernel, under each backend.

Issue 13, part 1: the ATen graphs fxslots runs must not be slower than eager. This runs the
Llama-style model (examples/llama.py) under eager, aot_eager, fxslots (CUDA graphs off, so each
kernel is attributed to its ATen op) and torch.compile default (and reduce-overhead, on
request), each in its own process, profiles a few steps and prints what differs most from the
base case's: kernel families, ATen ops, kernels, matrix products by shape (uncaptured cases),
and the forward's and backward's kernels apart. Each case also reports the SM clock and board
power sampled from NVML while it ran: two processes of one backend can differ by a percent.

    python benchmarks/profile_kernels.py [--size llama-large] [--cases a,b] [--base b] [--out d]
    python benchmarks/profile_kernels.py --from-json d/kernels-llama-large.json --base inductor
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CASES = ["eager", "aot_eager", "fxslots", "inductor"]  # and "fxslots+graphs"
# A case may add fxslots options: "fxslots+graphs+offload=auto" (a value is read as JSON when
# it parses), so two option sets profile side by side.


def run_case(case: str, size: str, batch: int, seqs: list[int], options: dict,
             code_dir: str | None = None) -> dict:
    """One case in this process: warm up, time 7 steps at the last sequence, profile 3."""
    import torch

    if code_dir:
        _log_code(case, code_dir)
    m, f, data = _build(case, size, batch, seqs, options)

    def step(s):
        f(*data[s]).backward()
        m.zero_grad(set_to_none=True)

    for _ in range(3):
        for s in seqs:
            step(s)
    torch.cuda.synchronize()
    times = []
    with Clocks() as clocks:
        for _ in range(7):
            t0 = time.perf_counter()
            step(seqs[-1])
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
        prof = _profile(m, f, data[seqs[-1]])
    kernels = _self_device_us(prof, lambda k: not k.startswith("aten::") and not is_annotation(k))
    return {"case": case, "families": families_of(kernels), "idle": idle_time(prof),
            "ms_median": statistics.median(times), "ms_spread": [min(times), max(times)],
            "ops": _self_device_us(prof, lambda k: k.startswith("aten::")), "kernels": kernels,
            "phases": phase_kernels(prof), "matmuls": matmul_shapes(prof),
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30, "clocks": clocks.summary()}


def _log_code(case: str, code_dir: str) -> None:
    """Inductor's code for each graph fxslots compiles (its DEBUG log), a file per case."""
    import logging

    os.makedirs(code_dir, exist_ok=True)
    name = "".join(c if c.isalnum() else "_" for c in case)
    kernels_log = logging.getLogger("fxslots.kernels")
    kernels_log.addHandler(logging.FileHandler(os.path.join(code_dir, f"code-{name}.txt"),
                                               mode="w"))
    kernels_log.setLevel(logging.DEBUG)


def _build(case: str, size: str, batch: int, seqs: list[int], options: dict):
    """(the bf16 Llama on CUDA, the case's callable of it, a batch per sequence length)."""
    import torch

    from examples.llama import SIZES, Llama, batch as make_batch

    cfg = SIZES[size]
    torch.manual_seed(0)
    m = Llama(cfg).cuda().to(torch.bfloat16)
    g = torch.Generator(device="cuda").manual_seed(0)
    data = {s: make_batch(cfg, batch, s, "cuda", g) for s in seqs}
    if case == "eager":
        return m, m, data
    if case in ("inductor", "reduce-overhead", "aot_eager"):
        kw = {"inductor": {}, "reduce-overhead": {"mode": "reduce-overhead"},
              "aot_eager": {"backend": "aot_eager"}}[case]
        return m, torch.compile(m, **kw), data
    # "fxslots" runs without CUDA graphs, so each kernel has its op; "fxslots+graphs" with
    from paired import parse_backend

    _, _, own = parse_backend(case.replace("+graphs", ""))
    graphs = {} if case.startswith("fxslots+graphs") else {"cudagraphs": False}
    return m, torch.compile(m, backend="fxslots", options={**graphs, **options, **own}), data


def _profile(m, f, args):
    """Three steps under the profiler, each synchronized between its forward and backward: the
    forward's kernels end before the backward's start, so each kernel's phase is the host window
    it ran in (``phase_kernels``)."""
    import torch

    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts, record_shapes=True) as prof:
        for _ in range(3):
            with torch.profiler.record_function("fxslots_profiled_step"):
                with torch.profiler.record_function("fxslots_forward"):
                    loss = f(*args)
                    torch.cuda.synchronize()
                loss.backward()
                m.zero_grad(set_to_none=True)
                torch.cuda.synchronize()
    return prof


def _self_device_us(prof, keep) -> dict:
    """Device microseconds and calls per profiled step of each event whose key ``keep`` takes."""
    out = {}
    for e in prof.key_averages():
        dev = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
        if dev and keep(e.key) and (e.key.startswith("aten::") or e.device_type.name == "CUDA"):
            out[e.key[:90]] = {"us_per_step": dev / 3, "calls_per_step": e.count / 3}
    return out


class Clocks:
    """The SM clock and board power, sampled every 20 ms from NVML while the timed steps run
    (NVML's power reading updates every 20-100 ms; a faster thread would contend for the GIL
    with a host-bound case):
    a kernel runs longer at a lower clock, and a GPU that idles less draws more power and may
    clock lower (a per-kernel comparison of two backends is only fair at equal clocks)."""

    def __enter__(self):
        import threading

        self.samples: list[tuple[int, int]] = []
        self.stop = threading.Event()
        import torch

        try:  # torch's own NVML readers map its device to NVML's (CUDA_VISIBLE_DEVICES)
            torch.cuda.clock_rate(), torch.cuda.power_draw()
        except Exception:  # no NVML: no figures, the profile goes on
            return self

        def sample():
            while not self.stop.wait(0.02):
                self.samples.append((torch.cuda.clock_rate(), torch.cuda.power_draw()))

        self.thread = threading.Thread(target=sample, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        if hasattr(self, "thread"):
            self.thread.join()

    def summary(self) -> dict:
        if not self.samples:
            return {}
        mhz, mw = zip(*self.samples, strict=True)
        return {"sm_mhz_median": statistics.median(mhz), "sm_mhz_min": min(mhz),
                "watts_median": statistics.median(mw) / 1e3, "samples": len(mhz)}


MARKERS = ("fxslots_profiled_step", "fxslots_forward")


def is_annotation(name: str) -> bool:
    """A span the profiler puts on the device's timeline for a ``record_function`` or a
    compiled graph's call: it covers kernels and the gaps between them, it is no device work
    (run 60a's first tables counted them)."""
    return name.startswith("## ") or name in MARKERS


def families_of(kernels: dict) -> dict:
    families: dict[str, dict] = {}
    for name, k in kernels.items():
        if not is_annotation(name):
            f = families.setdefault(family(name), {"us_per_step": 0.0, "calls_per_step": 0.0})
            f["us_per_step"] += k["us_per_step"]
            f["calls_per_step"] += k["calls_per_step"]
    return families


def phase_kernels(prof) -> dict:
    """Device time per kernel (and per family) in the forward and in the backward of a profiled
    step: a device event belongs to the forward when it starts inside a forward's host window
    (the profiled steps synchronize before their backward)."""
    events = kineto_events(prof)
    windows = [(t0, t1) for name, dev, t0, t1 in events
               if name == "fxslots_forward" and dev == "CPU"]
    steps = [(t0, t1) for name, dev, t0, t1 in events
             if name == "fxslots_profiled_step" and dev == "CPU"]
    out: dict = {"forward": {}, "backward": {}}
    n = max(len(steps), 1)
    for name, dev, t0, t1 in events:
        if dev != "CUDA" or not any(s0 <= t0 < s1 for s0, s1 in steps):
            continue
        phase = "forward" if any(w0 <= t0 < w1 for w0, w1 in windows) else "backward"
        # Inductor numbers its kernels per graph: the same kernel is named alike without it
        key = re.sub(r"_\d+$", "", name[:90]) if name.startswith("triton_") else name[:90]
        row = out[phase].setdefault(key, {"us_per_step": 0.0, "calls_per_step": 0.0})
        row["us_per_step"] += (t1 - t0) / 1e3 / n
        row["calls_per_step"] += 1 / n
    return out


def matmul_shapes(prof) -> dict:
    """Device time of each matrix product by its input shapes (ops run outside CUDA graphs
    only: a captured graph's kernels have no op)."""
    rows = {}
    for e in prof.key_averages(group_by_input_shape=True):
        dev = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
        if dev and e.key in ("aten::mm", "aten::addmm", "aten::bmm", "fxslots::mm_into"):
            rows[f"{e.key} {e.input_shapes}"[:120]] = {"us_per_step": dev / 3,
                                                      "calls_per_step": e.count / 3}
    return rows


# Kernel names differ between compiled graphs (Inductor numbers its kernels), so two backends are
# compared by family first: what kind of work the device time went to.
FAMILIES = [("copy", ("memcpy", "memset", "copy_", "direct_copy", "catarraybatched")),
            ("gemm", ("gemm", "xmma", "cutlass", "sm90_", "nvjet", "cublas")),
            ("attention", ("flash", "fmha", "attention", "efficient")),
            ("reduction", ("reduce", "softmax", "norm")),
            ("elementwise", ("elementwise", "vectorized", "unrolled"))]


def family(kernel: str) -> str:
    k = kernel.lower()
    if k.startswith("triton_"):
        return "triton " + k.split("_")[1]  # poi(ntwise), red(uction), per(sistent), tem(plate)
    return next((f for f, keys in FAMILIES if any(w in k for w in keys)), "other")


def kineto_events(prof) -> list[tuple[str, str, int, int]]:
    """(name, device type, start ns, end ns) of each event with a duration. A device event is
    work the device did (kernels, copies, memsets), never a user annotation: the profiler
    puts one on the device's timeline for each ``record_function`` and compiled graph, spanning
    the kernels and the gaps between them (run 60a counted them as device work)."""
    out = []
    for e in prof.profiler.kineto_results.events():
        device = e.device_type().name
        annotation = getattr(e, "is_user_annotation", lambda: False)() or is_annotation(e.name())
        if e.duration_ns() > 0 and not (device == "CUDA" and annotation):
            out.append((e.name(), device, e.start_ns(), e.end_ns()))
    return out


def idle_time(prof, top: int = 12) -> dict:
    """Where the device waits within a profiled step: its busy time (the union of kernels,
    device copies and memsets; not host-link copies) against the step's wall time, and the
    longest idle gaps, each with
    the host calls under way while the device waited (what the device waited for)."""
    # Kineto's events: name, device_type, start_ns and end_ns are methods.
    events = kineto_events(prof)
    steps = [(t0, t1) for name, dev, t0, t1 in events
             if name == "fxslots_profiled_step" and dev == "CPU"]
    # Host-link copies run beside compute on side streams when offloading: not compute time
    device = sorted((t0, t1, name) for name, dev, t0, t1 in events
                    if dev == "CUDA" and not name.startswith(("Memcpy DtoH", "Memcpy HtoD")))
    host = [(t0, t1, name) for name, dev, t0, t1 in events
            if dev == "CPU" and name != "fxslots_profiled_step"]
    wall = busy = 0
    gaps = []
    for s0, s1 in steps:
        wall += s1 - s0
        cursor, prev = s0, "(step start)"
        for d0, d1, name in (d for d in device if s0 <= d[0] < s1):
            if d0 > cursor:
                gaps.append((d0 - cursor, prev, name, cursor, d0))
            busy += max(0, d1 - max(d0, cursor))
            if d1 > cursor:
                cursor, prev = d1, name
        if s1 > cursor:
            gaps.append((s1 - cursor, prev, "(step end)", cursor, s1))
    gaps.sort(reverse=True)
    rows = []
    for ns, prev, nxt, g0, g1 in gaps[:top]:
        mid = (g0 + g1) // 2
        under = sorted(h for h in host if h[0] <= mid < h[1])
        rows.append({"us": ns / 1e3, "after": prev[:60], "before": nxt[:60],
                     "host": [h[2][:50] for h in under][-4:]})
    n = max(len(steps), 1)
    # Inside a captured graph the gaps are short and many: what each follows says what the
    # compute stream waited on (a wait for a side stream shows as a gap after the kernel
    # before the join)
    short: dict[str, float] = {}
    for ns, prev, *_ in gaps:
        if ns < 100_000:
            short[prev[:60]] = short.get(prev[:60], 0.0) + ns / 1e3 / n
    return {"short_gaps_us_after": dict(sorted(short.items(), key=lambda kv: -kv[1])[:top]),
            "wall_us": wall / 1e3 / n, "busy_us": busy / 1e3 / n,
            "idle_us": (wall - busy) / 1e3 / n, "gaps": rows,
            "gaps_over_20us": sum(1 for g in gaps if g[0] > 20_000) / n,
            "idle_in_gaps_over_20us": sum(g[0] for g in gaps if g[0] > 20_000) / 1e3 / n}


def idle_table(r: dict) -> str:
    i = r["idle"]
    lines = [f"{r['case']}: step {i['wall_us']:.0f} us, device busy {i['busy_us']:.0f} us, idle "
             f"{i['idle_us']:.0f} us ({i['gaps_over_20us']:.0f} gaps over 20 us per step hold "
             f"{i['idle_in_gaps_over_20us']:.0f} us); longest gaps (3 steps):"]
    for g in i["gaps"]:
        lines.append(f"  {g['us']:>8.0f} us after {g['after']!r} before {g['before']!r}; "
                     f"host in: {' > '.join(g['host'])}")
    lines.append("gaps under 100 us, us per step by what they follow:")
    for after, us in i.get("short_gaps_us_after", {}).items():
        lines.append(f"  {us:>8.0f} us after {after!r}")
    return "\n".join(lines)


def diff_table(base: dict, other: dict, key: str, top: int = 20,
               cases: tuple[str, str] | None = None) -> str:
    # Results of earlier runs may lack a table (matmuls and phases came in run 60)
    base_rows, other_rows = base.get(key, {}), other.get(key, {})
    rows = []
    for n in set(base_rows) | set(other_rows):
        a = base_rows.get(n, {"us_per_step": 0.0, "calls_per_step": 0})
        b = other_rows.get(n, {"us_per_step": 0.0, "calls_per_step": 0})
        rows.append((b["us_per_step"] - a["us_per_step"], n, a, b))
    rows.sort(key=lambda r: -abs(r[0]))
    b_name, o_name = cases or (base["case"], other["case"])
    lines = [f"{'delta us':>10} {b_name + ' us':>12} {o_name + ' us':>14} "
             f"{'calls b/o':>11}  name"]
    lines.append(f"{'total':>10} {sum(r[2]['us_per_step'] for r in rows):>12.0f} "
                 f"{sum(r[3]['us_per_step'] for r in rows):>14.0f}")
    for d, n, a, b in rows[:top]:
        lines.append(f"{d:>10.0f} {a['us_per_step']:>12.0f} {b['us_per_step']:>14.0f} "
                     f"{a['calls_per_step']:>5.0f}/{b['calls_per_step']:<5.0f}  {n}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="llama-large")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seqs", default="1024,2048")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--options", default="{}", help="fxslots options, as JSON")
    ap.add_argument("--base", default="eager", help="the case the others are compared with")
    ap.add_argument("--out", default=".")
    ap.add_argument("--code-dir", help="write Inductor's code of fxslots' graphs there, per case")
    ap.add_argument("--logs-dir", help="write each case's stderr there, with TORCH_LOGS="
                                       "output_code: the code Inductor generated, per case")
    ap.add_argument("--from-json", help="print the tables of a run's kernels-*.json again")
    ap.add_argument("--case", help=argparse.SUPPRESS)
    a = ap.parse_args()
    seqs = [int(s) for s in a.seqs.split(",")]
    if a.from_json:
        with open(a.from_json) as fh:
            report(json.load(fh), a.base)
        return
    if a.case:
        print(json.dumps(run_case(a.case, a.size, a.batch, seqs, json.loads(a.options),
                                  a.code_dir)))
        return
    results = {}
    for case in a.cases.split(","):
        # A case named twice runs twice (before and after the others: drift of the machine)
        key = case if case not in results else f"{case} again"
        p = subprocess.run([sys.executable, __file__, "--case", case, "--size", a.size,
                            "--batch", str(a.batch), "--seqs", a.seqs, "--options", a.options]
                           + (["--code-dir", a.code_dir] if a.code_dir else []),
                           capture_output=True, text=True, timeout=500,
                           env={**os.environ, "TORCH_LOGS": "output_code"} if a.logs_dir else None)
        if a.logs_dir:
            os.makedirs(a.logs_dir, exist_ok=True)
            name = "".join(c if c.isalnum() else "_" for c in key)
            with open(os.path.join(a.logs_dir, f"log-{name}.txt"), "w") as fh:
                fh.write(p.stderr)
        line = [x for x in p.stdout.splitlines() if x.startswith("{")]
        if not line:
            print(f"{case}: failed\n{p.stderr[-2000:]}")
            continue
        results[key] = r = {**json.loads(line[-1]), "case": key}
        c = r.get("clocks") or {}
        print(f"{key}: {r['ms_median']:.2f} ms/step (spread {r['ms_spread'][0]:.2f}-"
              f"{r['ms_spread'][1]:.2f}), peak {r['peak_gib']:.2f} GiB, SM clock "
              f"{c.get('sm_mhz_median', '-')} MHz (min {c.get('sm_mhz_min', '-')}), "
              f"{c.get('watts_median', 0):.0f} W", flush=True)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, f"kernels-{a.size}.json"), "w") as fh:
        json.dump(results, fh)
    report(results, a.base)


def report(results: dict, base: str) -> None:
    """The tables of a run, from its results (as the JSON holds them: ``--from-json``)."""
    for r in results.values():
        r["kernels"] = {k: v for k, v in r["kernels"].items() if not is_annotation(k)}
        r["families"] = families_of(r["kernels"])
        for phase in ("forward", "backward"):
            kernels = r.get("phases", {}).get(phase, {})
            r.setdefault("phases", {})[phase] = {k: v for k, v in kernels.items()
                                                 if not is_annotation(k)}
            r["phases"][phase + " families"] = families_of(r["phases"][phase])
        if "idle" in r:
            print("\n" + idle_table(r))
    base = base if base in results else next(iter(results), None)
    for case in results:
        if case != base:
            print(f"\n== kernel families, {case} against {base} (device us per step) ==")
            print(diff_table(results[base], results[case], "families"))
            print(f"\n== ATen ops, {case} against {base} (device us per step) ==")
            print(diff_table(results[base], results[case], "ops"))
            print(f"\n== kernels, {case} against {base} ==")
            print(diff_table(results[base], results[case], "kernels", 15))
            print(f"\n== matrix products by shape, {case} against {base} ==")
            print(diff_table(results[base], results[case], "matmuls", 30))
            for phase in ("forward families", "backward families", "forward", "backward"):
                print(f"\n== {phase}, {case} against {base} (device us per step) ==")
                print(diff_table(results[base]["phases"], results[case]["phases"], phase, 25,
                                 (base, case)))


if __name__ == "__main__":
    main()
