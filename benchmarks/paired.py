"""Paired: several backends in one process, their timed repetitions interleaved.

On a host-bound model the step time of every backend moves by ~20% from one machine start to
the next, and by several percent between cases run minutes apart in separate processes (H200
runs 24-25), more than the differences the speed targets ask about. Here each backend trains
its own copy of the model (same weights) in this one process, and the repetitions alternate
A, B, A, B..., so each pair of repetitions ran within milliseconds on one machine state: the
ratio of each pair is the sample, reported as median and min-max.

    python benchmarks/paired.py launch-bound sequential fxslots,reduce-overhead [--reps 21]
    python benchmarks/paired.py launch-bound sequential fxslots:accum,fxslots
    python benchmarks/paired.py llama-small sequential fxslots+offload=auto,fxslots
        [--steps 8] [--out paired.json] [--smoke] [--seconds 500]

A backend is ``name[:schedule][+option=value...]``: ``fxslots:accum`` runs fxslots on another
schedule, ``fxslots+offload=auto`` with that option (a value is read as JSON when it parses);
``+dynamic=true`` / ``+dynamic=false`` is ``torch.compile``'s ``dynamic`` (any backend).
``--warmup-seqs``: the warm-up part's 16 sequence variants instead of the model's, each warmed
up (compiled, captured) before timing, so the steady steps of bench.py's warm-up part compare
pair by pair:

    python benchmarks/paired.py launch-bound sequential \
        fxslots+dynamic=true,reduce-overhead+dynamic=false --warmup-seqs

Every backend's gradients are checked against eager after timing (as bench.py does). The
``eval`` schedule computes the loss under ``torch.no_grad`` (an inference graph), one variant a
step; its error column is the loss's against eager's:

    python benchmarks/paired.py llama-small eval fxslots+capture_inference=true,fxslots,eager
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_plan  # noqa: E402
import bench_work  # noqa: E402


def parse_backend(spec: str) -> tuple[str, str | None, dict]:
    """``"fxslots:accum+offload=auto"`` -> ``("fxslots", "accum", {"offload": "auto"})``."""
    head, *opts = spec.split("+")
    backend, _, schedule = head.partition(":")
    options = {}
    for opt in opts:
        key, eq, value = opt.partition("=")
        if not key or not eq:
            raise SystemExit(f"paired.py: backend {spec!r}: options are +name=value, not {opt!r}")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return backend, schedule or None, options


def build_case(model: str, schedule: str, backend: str, smoke: bool = False,
               options: dict | None = None, seqs: tuple[int, ...] | None = None):
    """One benchmark case, compiled but not run: (its step with zero_grad, the compiled model,
    the workload, the bare step). ``options``: fxslots options beyond the schedule's slots
    (``dynamic``: torch.compile's); ``seqs``: sequence variants other than the model's."""
    device = "cpu" if smoke else "cuda"
    work = bench_work.Workload(bench_plan.model_config(model, smoke), device, seqs=seqs,
                               microbatches=4 if schedule == "1f1b" else 1)
    options = {"slots": bench_plan.slots_for(schedule, len(work.seqs)), **(options or {})}
    dynamic = options.pop("dynamic", None)
    f = bench_work.compile_case(work.model, backend, options, dynamic)
    step = bench_work.make_step(schedule, work, bench_work.mark_for(backend))
    return bench_work.with_zero_grad(step, work.model, schedule), f, work, step


def _case(model: str, schedule: str, backend: str, smoke: bool, options: dict, seqs=None):
    """``build_case``, warmed up."""
    run, f, work, step = build_case(model, schedule, backend, smoke, options, seqs)
    for k in range(3 * bench_work.steps_per_pass(schedule, work)):
        run(f, k)
    bench_work.sync(work.device)
    return run, f, work, step


def paired(model: str, schedule: str, backends: list[str], reps: int, steps: int,
           smoke: bool = False, seqs: tuple[int, ...] | None = None,
           seconds: float | None = None) -> dict:
    """``seconds``: fewer repetitions where ``reps`` would not end (with the checks after
    them) within that many seconds of the start; at least one runs."""
    import fxslots

    deadline = None if seconds is None else time.monotonic() + seconds

    cases, plans, moved = {}, {}, {}
    _prime_dynamic(model, smoke, seqs)
    for b in backends:
        backend, own_schedule, options = parse_backend(b)
        before, counted = {id(r) for r in fxslots.regions()}, dict(fxslots.counters)
        t0 = time.monotonic()
        cases[b] = _case(model, own_schedule or schedule, backend, smoke, options, seqs)
        # Progress as it goes: a run its caller's time limit kills prints no table, and run
        # 53's first llama-small pair left an empty file (Inductor compiling on a cold machine).
        print(f"{b}: compiled and warmed up in {time.monotonic() - t0:.1f} s", flush=True)
        moved[b] = _counted_since(counted, fxslots.counters)
        if backend == "fxslots":  # its own regions' plans: what offload chose, the copies
            figures = bench_work.fxslots_figures(
                [r for r in fxslots.regions() if id(r) not in before])
            # The figures' counters are the process's, summed over every backend so far
            # (run 52a's plans read captures 4, 8, 12, 16): this backend's own instead.
            plans[b] = {k: moved[b].get(k, 0) if k in fxslots.counters else v
                        for k, v in figures.items()}
    ms: dict[str, list[float]] = {b: [] for b in backends}
    for r in range(reps):
        started = time.monotonic()
        order = backends if r % 2 == 0 else backends[::-1]  # neither always goes first
        for b in order:
            run, f, work, _ = cases[b]
            ms[b] += bench_work.timed_reps(run, f, work.device, 1, steps)
        print(f"repetition {r + 1}/{reps}: " + ", ".join(f"{b} {ms[b][-1]:.2f}"
                                                       for b in backends), flush=True)
        if not _time_for_another(deadline, time.monotonic() - started):
            break
    base = backends[-1]
    out = {"model": model, "schedule": schedule, "reps": len(ms[base]), "steps": steps,
           "seqs": seqs,
           "torch": torch.__version__, "ms_per_step": ms, "base": base, "ratios": {},
           "max_grad_err": {}, "plans": plans, "link_bytes_per_s": _links(), "forward_ms": {},
           "warmup_counters": moved}
    for b in backends:
        ratios = sorted(a / c for a, c in zip(ms[b], ms[base], strict=True))
        out["ratios"][b] = {"median": statistics.median(ratios), "min": ratios[0],
                            "max": ratios[-1]}
        run, f, work, step = cases[b]
        name, own, _ = parse_backend(b)
        out["forward_ms"][b] = forward_ms(work, f, name, own or schedule, steps)
        out["max_grad_err"][b] = (bench_work.output_error(work, f) if schedule == "eval"
                                  else bench_work.grad_error(work, f, step))
    return out


def _prime_dynamic(model: str, smoke: bool, seqs) -> None:
    """Dynamo makes a dimension dynamic once one function has seen two sizes of it, whatever
    the backend: left alone, the first backend compiled gets a static graph for its first
    variant and a dynamic one for the rest, the later ones one dynamic graph from the start
    (run 51's warm-up counters: compiles 2 against 1). Each variant run once under the "eager"
    backend first gives every backend that second start."""
    cfg = bench_plan.model_config(model, smoke)
    if len(seqs or cfg["seqs"]) < 2:
        return  # one size: nothing to make dynamic, and no model to build for it
    work = bench_work.Workload(cfg, "cpu" if smoke else "cuda", seqs=seqs)
    f = torch.compile(work.model, backend="eager")
    with torch.no_grad():
        for s in work.seqs:
            work.loss(f, s)


def _time_for_another(deadline: float | None, rep_s: float) -> bool:
    """Whether one more repetition, and then the forward timing and gradient check (each about
    a repetition's time), end before ``deadline``."""
    return deadline is None or time.monotonic() + 3 * rep_s < deadline


def _counted_since(before: dict, now) -> dict:
    """fxslots' counters that moved while one backend compiled and warmed up (its captures,
    memsets made kernels, fallbacks): the whole process counts into one ``fxslots.counters``."""
    return {k: v - before.get(k, 0) for k, v in sorted(now.items()) if v != before.get(k, 0)}


def forward_ms(work, f, backend: str, schedule: str, steps: int) -> float | None:
    """The median device time of the largest variant's forward alone (CUDA events around the
    loss) on a one-microbatch schedule: the compute its copies to the host hide under (the
    offloaded bytes reported are the largest variant's too). None on CPU and on schedules with
    several microbatches in flight."""
    if work.device.type != "cuda" or schedule not in ("sequential", "accum"):
        return None
    events, mark = [], bench_work.mark_for(backend)
    for _ in range(steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        mark()  # reduce-overhead's step marker, as the timed steps have it
        a.record()
        loss = work.loss(f, max(work.seqs))
        b.record()
        loss.backward()
        work.model.zero_grad(set_to_none=schedule != "accum")
        events.append((a, b))
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in events)


def _links() -> dict:
    """The host link fxslots measured, per CUDA device (offload="auto" plans with it)."""
    from fxslots import costs

    return {str(k): v for k, v in costs._LINK.items()}


def table(res: dict) -> str:
    w = max(16, *map(len, res["ms_per_step"]))
    err = "loss err" if res["schedule"] == "eval" else "grad err"
    lines = [f"{res['model']} {res['schedule']}: {res['reps']} interleaved repetitions of "
             f"{res['steps']} steps; ratio to {res['base']}, pair by pair",
             f"{'backend':<{w}} | ms/step median [min-max] | x {res['base']} median [min-max] "
             f"| {err} | offloaded MiB/fwd | fwd ms | x link capacity "
             f"(the largest variant's)"]
    for b, ms in res["ms_per_step"].items():
        r = res["ratios"][b]
        lines.append(f"{b:<{w}} | {statistics.median(ms):6.2f} [{min(ms):.2f}-{max(ms):.2f}]"
                     f"{'':<7} | {r['median']:.3f} [{r['min']:.3f}-{r['max']:.3f}]{'':<9} "
                     f"| {res['max_grad_err'][b]:.1e}  | {_offloaded(res, b):>17} "
                     f"| {_ms(res.get('forward_ms', {}).get(b)):>6} | {_capacity(res, b)}")
    spread, worst = max((own_spread(ms), b) for b, ms in res["ms_per_step"].items())
    if spread > UNSTEADY:
        lines.append(f"unsteady: {worst}'s own steps spread {spread:.1%} from one repetition "
                     f"to the next (interquartile range over median; over {UNSTEADY:.0%}): "
                     f"the machine or the backend was not steady, and the ratios carry it")
    if res.get("link_bytes_per_s"):
        lines.append(f"host link measured: {res['link_bytes_per_s']} B/s")
    for b, moved in res.get("warmup_counters", {}).items():
        if moved:
            lines.append(f"{b} warming up: " + ", ".join(f"{k} {v}" for k, v in moved.items()))
    return "\n".join(lines)


# A backend's own step times, interquartile range over median, above which a run was not
# steady: runs 51-54 read 0.1-0.7% with ATen kernels and 0.6-3.3% under Inductor (one outlier
# step does not move it), and the two Inductor pairs run 54 took after two killed processes
# 5.4% and 8.7%, their ratios 1.051 and 1.096 where run 53's steady one read 1.031.
UNSTEADY = 0.05


def own_spread(ms: list[float]) -> float:
    if len(ms) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(ms, n=4, method="inclusive")
    return (q3 - q1) / statistics.median(ms)


def _offloaded(res: dict, b: str) -> str:
    plan = res.get("plans", {}).get(b)
    return "-" if plan is None else f"{plan['offloaded_bytes_per_forward'] / 2**20:.1f}"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _capacity(res: dict, b: str) -> str:
    """Bytes offloaded a forward over what the link carries in the base's forward time (the
    compute they hide under; the slowest device's link where there are several)."""
    plan, fwd = res.get("plans", {}).get(b), res.get("forward_ms", {}).get(res["base"])
    links = res.get("link_bytes_per_s") or {}
    if plan is None or not fwd or not links:
        return "-"
    return f"{plan['offloaded_bytes_per_forward'] / (min(links.values()) * fwd / 1e3):.2f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("schedule")
    ap.add_argument("backends", help="comma-separated; the last is the base of the ratios")
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--out", default=None)
    ap.add_argument("--seconds", type=float, default=None,
                    help="stop adding repetitions so the run ends within this many seconds")
    ap.add_argument("--smoke", action="store_true", help="the tiny models, on CPU")
    ap.add_argument("--warmup-seqs", action="store_true",
                    help="the warm-up part's 16 sequence variants, not the model's")
    args = ap.parse_args()
    seqs = None
    if args.warmup_seqs:
        seqs = bench_plan.SMOKE_WARMUP_SEQS if args.smoke else bench_plan.WARMUP_SEQS
    res = paired(args.model, args.schedule, args.backends.split(","), args.reps, args.steps,
                 args.smoke, seqs, args.seconds)
    print(table(res))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
