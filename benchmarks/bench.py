"""fxslots against eager, torch.compile (default) and mode="reduce-overhead", on one GPU.

Models (DESIGN.md): Sequential of Linear(H, H, bias=False) + GELU in bf16.
  heavy:        H=4096, 8 layers, batch 4, sequence variants 512/1024/1536/2048
  launch-bound: H=1024, 24 layers, batch 1, same variants
Schedules, per step:
  sequential: one microbatch (F B), cycling the 4 variants step by step
  accum:      sequential, with zero_grad(set_to_none=False): persistent .grad buffers
  ffffbbbb:   the 4 variants in flight at once (F F F F B B B B)
  1f1b:       4 microbatches of one variant, 2 in flight (F F B F B F B B)
Each case runs in its own process so memory figures are clean. Prints a table, writes JSON.

    python benchmarks/bench.py [--models heavy,launch-bound] [--out benchmarks/results/x.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

MODELS = {
    "heavy": dict(H=4096, LAYERS=8, B=4),
    "launch-bound": dict(H=1024, LAYERS=24, B=1),
}
SEQS = [512, 1024, 1536, 2048]
SCHEDULES = ["sequential", "accum", "ffffbbbb", "1f1b"]
BACKENDS = ["eager", "inductor", "reduce-overhead", "fxslots", "fxslots-recompute"]
SLOTS = {"sequential": 1, "accum": 1, "ffffbbbb": 4, "1f1b": 2}
STEPS = 12


def build(cfg):
    import torch

    torch.manual_seed(0)
    layers = []
    for _ in range(cfg["LAYERS"]):
        layers += [torch.nn.Linear(cfg["H"], cfg["H"], bias=False), torch.nn.GELU()]
    return torch.nn.Sequential(*layers).cuda().to(torch.bfloat16)


def step_fn(schedule, xs, mark):
    def loss(y):
        return y.float().square().mean()

    def sequential(f, s):
        mark()
        loss(f(xs[s])).backward()

    def ffffbbbb(f, s):
        mark()
        ys = [f(xs[v]) for v in SEQS]
        for y in ys:
            loss(y).backward()

    def one_f_one_b(f, s):
        mark()
        ys = [f(xs[s]), f(xs[s] * 0.5)]
        for k in range(2):
            loss(ys.pop(0)).backward()
            ys.append(f(xs[s] * (k + 2)))
        for y in ys:
            loss(y).backward()

    return {"sequential": sequential, "accum": sequential, "ffffbbbb": ffffbbbb,
            "1f1b": one_f_one_b}[schedule]


def run_case(model_name, schedule, backend):
    import torch

    cfg = MODELS[model_name]
    m = build(cfg)
    ref = build(cfg)  # an eager twin for the correctness check after timing
    g = torch.Generator(device="cuda").manual_seed(0)
    xs = {s: torch.randn(cfg["B"], s, cfg["H"], device="cuda", dtype=torch.bfloat16, generator=g)
          for s in SEQS}
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    set_to_none = schedule != "accum"
    mark = (torch.compiler.cudagraph_mark_step_begin if backend == "reduce-overhead"
            else (lambda: None))
    row = dict(model=model_name, schedule=schedule, case=backend, torch=torch.__version__,
               ms_per_step=None, warm_s=None, peak_alloc_gib=None, reserved_gib=None,
               captures=None, copied_bytes=None, copy_free_fraction=None, slot_bytes=None,
               largest_saved_bytes=None, max_grad_err=None, error=None)
    try:
        torch._dynamo.config.cache_size_limit = 64
        if backend == "eager":
            f = m
        elif backend == "inductor":
            f = torch.compile(m)
        elif backend == "reduce-overhead":
            f = torch.compile(m, mode="reduce-overhead")
        else:
            extra = {"recompute": "pointwise"} if backend == "fxslots-recompute" else {}
            f = torch.compile(m, backend="fxslots", options={"slots": SLOTS[schedule], **extra})
        step = step_fn(schedule, xs, mark)
        t0 = time.perf_counter()
        for _ in range(3):
            for s in SEQS:
                step(f, s)
                m.zero_grad(set_to_none=set_to_none)
        torch.cuda.synchronize()
        row["warm_s"] = time.perf_counter() - t0
        row["peak_warm_gib"] = (torch.cuda.max_memory_allocated() - base) / 2**30
        torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        for i in range(STEPS):
            step(f, SEQS[i % len(SEQS)])
            m.zero_grad(set_to_none=set_to_none)
        torch.cuda.synchronize()
        row["ms_per_step"] = (time.perf_counter() - t0) / STEPS * 1e3
        row["peak_steady_gib"] = (torch.cuda.max_memory_allocated() - base) / 2**30
        row["peak_alloc_gib"] = max(row["peak_warm_gib"], row["peak_steady_gib"])
        row["reserved_gib"] = torch.cuda.memory_reserved() / 2**30
        if backend.startswith("fxslots"):
            _fxslots_figures(row)
        row["max_grad_err"] = _grad_error(m, ref, f, step, set_to_none)
    except Exception as e:  # noqa: BLE001 - a failing case is a row, not a crash
        row["error"] = f"{type(e).__name__}: {str(e).strip()[:300]}"
    return row


def _fxslots_figures(row):
    import fxslots
    from fxslots.schemas import evaluate

    row["captures"] = fxslots.counters["captures"]
    slots = [s.nbytes for g in fxslots.regions() for s in g.ring.slots]
    row["slot_bytes"], row["n_slots"] = sum(slots), len(slots)
    variants = [v for g in fxslots.regions() for v in g.live_variants()]
    saved, free, copied = [], 0, 0
    for v in variants:
        for lay in v.layouts.values():  # one per concrete shape the variant ran at
            named = dict(lay.key)
            env = {sym: named[str(sym)] for sym in v.binder.read}
            saved.append(evaluate(v.plan.slot_bytes, env))
            free += evaluate(v.plan.copy_free_bytes, env)
            copied += evaluate(v.plan.copied_bytes, env)
    row["largest_saved_bytes"] = max(saved, default=0)
    row["copied_bytes"] = copied
    row["copy_free_fraction"] = free / sum(saved) if sum(saved) else None


def _grad_error(m, ref, f, step, set_to_none):
    """One more step on both models from zeroed grads; the largest relative grad difference."""

    ref.load_state_dict(m.state_dict())
    for mod in (m, ref):
        for p in mod.parameters():
            p.grad = None
    for s in SEQS[:2]:
        step(f, s)
        step(ref, s)
    err = 0.0
    for a, b in zip(m.parameters(), ref.parameters(), strict=True):
        scale = b.grad.float().abs().max().item() or 1.0
        err = max(err, (a.grad.float() - b.grad.float()).abs().max().item() / scale)
    return err


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--schedules", default=",".join(SCHEDULES))
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--out", default=None)
    ap.add_argument("--png", default=None, help="also draw the results as a chart")
    ap.add_argument("--case", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.case:
        print(json.dumps(run_case(*args.case)))
        return
    rows = []
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                   "h200.json")
    for model in args.models.split(","):
        for sched in args.schedules.split(","):
            for be in args.backends.split(","):
                if be == "inductor" and sched not in ("sequential",):
                    continue  # default compile: one schedule is enough to place it
                p = subprocess.run([sys.executable, __file__, "--case", model, sched, be],
                                   capture_output=True, text=True, timeout=400)
                line = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
                row = json.loads(line[-1]) if line else dict(
                    model=model, schedule=sched, case=be, error=p.stderr.strip()[-300:])
                rows.append(row)
                print(_fmt(row), flush=True)
                _write(out, rows)  # after every case: a run cut short keeps what it measured
    print()
    print(table(rows))
    print(f"\nwrote {out}")
    if args.png:
        from chart import render

        render(out, args.png)
        print(f"wrote {args.png}")


def _write(out, rows):
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as fh:
        json.dump(rows, fh, indent=1)


def _fmt(r):
    return json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()})


def table(rows):
    """One table: per model and schedule, each case with its ratios to eager."""
    head = ("model", "schedule", "case", "ms/step", "x eager", "peak GiB", "x eager", "steady",
            "reserved", "captures", "warm s", "copy-free", "grad err", "error")
    lines = []
    for r in rows:
        e = next((x for x in rows if x["model"] == r["model"] and x["schedule"] == r["schedule"]
                  and x["case"] == "eager"), None)

        def ratio(k):
            if e is None or r.get(k) is None or not e.get(k):
                return "-"
            return f"{r[k] / e[k]:.2f}"

        def f(k, fmt):
            return "-" if r.get(k) is None else format(r[k], fmt)

        lines.append((r["model"], r["schedule"], r["case"], f("ms_per_step", ".2f"),
                      ratio("ms_per_step"), f("peak_alloc_gib", ".2f"), ratio("peak_alloc_gib"),
                      f("peak_steady_gib", ".2f"),
                      f("reserved_gib", ".2f"), f("captures", "d"), f("warm_s", ".1f"),
                      f("copy_free_fraction", ".0%"), f("max_grad_err", ".1e"),
                      (r.get("error") or "")[:60]))
    widths = [max(len(str(x[i])) for x in [head, *lines]) for i in range(len(head))]
    fmt = " | ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*head), fmt.format(*("-" * w for w in widths))]
                     + [fmt.format(*x) for x in lines])


if __name__ == "__main__":
    main()
