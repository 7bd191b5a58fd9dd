"""Where the GPU time of a training step goes, kernel by kernel, under each backend.

Issue 13, part 1: the ATen graphs fxslots runs must not be slower than eager. This runs the
Llama-style model (examples/llama.py) under eager, aot_eager, fxslots (CUDA graphs off, so each
kernel is attributed to its ATen op) and torch.compile default, each in its own process,
profiles a few steps and prints the ATen ops whose device time differs most from eager's.

    python benchmarks/profile_kernels.py [--size llama-large] [--out dir]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CASES = ["eager", "aot_eager", "fxslots", "inductor"]


def run_case(case: str, size: str, batch: int, seqs: list[int], options: dict) -> dict:
    import torch

    from examples.llama import SIZES, Llama, batch as make_batch

    cfg = SIZES[size]
    torch.manual_seed(0)
    m = Llama(cfg).cuda().to(torch.bfloat16)
    g = torch.Generator(device="cuda").manual_seed(0)
    data = {s: make_batch(cfg, batch, s, "cuda", g) for s in seqs}
    if case == "eager":
        f = m
    elif case == "inductor":
        f = torch.compile(m)
    elif case == "aot_eager":
        f = torch.compile(m, backend="aot_eager")
    else:
        f = torch.compile(m, backend="fxslots", options={"cudagraphs": False, **options})

    def step(s):
        f(*data[s]).backward()
        m.zero_grad(set_to_none=True)

    for _ in range(3):
        for s in seqs:
            step(s)
    torch.cuda.synchronize()
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        step(seqs[-1])
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(3):
            step(seqs[-1])
        torch.cuda.synchronize()
    ops = {}
    for e in prof.key_averages():
        dev = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
        if dev and e.key.startswith("aten::"):
            ops[e.key] = {"us_per_step": dev / 3, "calls_per_step": e.count / 3}
    kernels = {}
    for e in prof.key_averages():
        dev = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
        if dev and not e.key.startswith("aten::") and e.device_type.name == "CUDA":
            kernels[e.key[:90]] = {"us_per_step": dev / 3, "calls_per_step": e.count / 3}
    return {"case": case, "ms_median": statistics.median(times),
            "ms_spread": [min(times), max(times)], "ops": ops, "kernels": kernels,
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30}


def diff_table(base: dict, other: dict, key: str, top: int = 20) -> str:
    names = set(base[key]) | set(other[key])
    rows = []
    for n in names:
        a = base[key].get(n, {"us_per_step": 0.0, "calls_per_step": 0})
        b = other[key].get(n, {"us_per_step": 0.0, "calls_per_step": 0})
        rows.append((b["us_per_step"] - a["us_per_step"], n, a, b))
    rows.sort(key=lambda r: -abs(r[0]))
    lines = [f"{'delta us':>10} {'eager us':>10} {other['case'] + ' us':>14} {'calls e/o':>11}  name"]
    for d, n, a, b in rows[:top]:
        lines.append(f"{d:>10.0f} {a['us_per_step']:>10.0f} {b['us_per_step']:>14.0f} "
                     f"{a['calls_per_step']:>5.0f}/{b['calls_per_step']:<5.0f}  {n}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="llama-large")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seqs", default="1024,2048")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--options", default="{}", help="fxslots options, as JSON")
    ap.add_argument("--out", default=".")
    ap.add_argument("--case", help=argparse.SUPPRESS)
    a = ap.parse_args()
    seqs = [int(s) for s in a.seqs.split(",")]
    if a.case:
        print(json.dumps(run_case(a.case, a.size, a.batch, seqs, json.loads(a.options))))
        return
    results = {}
    for case in a.cases.split(","):
        p = subprocess.run([sys.executable, __file__, "--case", case, "--size", a.size,
                            "--batch", str(a.batch), "--seqs", a.seqs, "--options", a.options],
                           capture_output=True, text=True, timeout=500)
        line = [x for x in p.stdout.splitlines() if x.startswith("{")]
        if not line:
            print(f"{case}: failed\n{p.stderr[-2000:]}")
            continue
        results[case] = json.loads(line[-1])
        r = results[case]
        print(f"{case}: {r['ms_median']:.2f} ms/step (spread {r['ms_spread'][0]:.2f}-"
              f"{r['ms_spread'][1]:.2f}), peak {r['peak_gib']:.2f} GiB", flush=True)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, f"kernels-{a.size}.json"), "w") as fh:
        json.dump(results, fh)
    if "eager" in results:
        for case in results:
            if case != "eager":
                print(f"\n== ATen ops, {case} against eager (device us per step) ==")
                print(diff_table(results["eager"], results[case], "ops"))
        if "fxslots" in results:
            print("\n== kernels, fxslots against eager ==")
            print(diff_table(results["eager"], results["fxslots"], "kernels", 15))


if __name__ == "__main__":
    main()
