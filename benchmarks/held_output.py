"""The loop most training code writes holds each step's output until the next forward returns:

    out = model(x); out.float().square().mean().backward()   # ``out`` rebound next step

bench.py's loop drops the output inside the step instead. fxslots' forward writes its large
outputs into its slot's output buffer itself, two buffers in turn (``staging.OutputBanks``), so
neither loop should copy them out of the pool. Each case (backend x loop) runs in its own
process: ms per step (median and spread over repetitions), peak allocated above the model and
inputs, reserved, the bytes replays copied out of the pool per step, captures in the timed
steps, and the gradient check against an eager twin. Prints a table, writes JSON.

    python benchmarks/held_output.py [--model heavy] [--seq 2048] [--out dir] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

BACKENDS = ("eager", "fxslots", "reduce-overhead")
LOOPS = ("dropped", "held")


def run_case(backend: str, loop: str, model: str, seq: int, reps: int, steps: int,
             smoke: bool = False) -> dict:
    from bench_plan import MODELS, SMOKE_MODELS
    from bench_work import (Memory, Workload, compile_case, error_text, fxslots_counter,
                            grad_error, mark_for, spread, timed_reps, with_zero_grad)

    work = Workload((SMOKE_MODELS if smoke else MODELS)[model], "cpu" if smoke else "cuda",
                    seqs=(seq,))
    f = compile_case(work.model, backend, {}, None)
    mark, held = mark_for(backend), {}

    def step(g, k):
        mark()
        if loop == "held" and g is f:
            held["out"] = g(*work.batches[seq][0])  # bound until the next step's forward returns
            held["out"].float().square().mean().backward()
        else:
            work.loss(g, seq).backward()

    try:  # reduce-overhead's .grad over two steps is a graph output the second overwrites
        err = grad_error(work, f, step)
    except RuntimeError as e:
        err, grad_failure = float("nan"), error_text(e)
    else:
        grad_failure = None
    work.model.zero_grad(set_to_none=True)
    run = with_zero_grad(step, work.model, "sequential")
    for k in range(3):
        run(f, k)
    mem = Memory(work.device)
    captures, copied = fxslots_counter("captures"), fxslots_counter("pool_bytes_copied_out")
    row = spread(timed_reps(run, f, work.device, reps, steps), "ms_per_step")
    row.update(peak_gib=mem.peak_gib() or 0.0, reserved_gib=mem.reserved_gib() or 0.0,
               max_grad_err=err, grad_check_failed=grad_failure,
               captures_timed=fxslots_counter("captures") - captures,
               copied_out_mib_per_step=(fxslots_counter("pool_bytes_copied_out") - copied)
               / (reps * steps) / 2**20)
    return row


def table(rows: list[dict]) -> str:
    head = ("backend", "loop", "ms/step [min-max]", "x eager", "peak GiB", "reserved GiB",
            "copied out MiB/step", "captures timed", "grad err")
    eager = {r["loop"]: r.get("ms_per_step") for r in rows if r["backend"] == "eager"}
    lines = [" | ".join(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['backend']} | {r['loop']} | {r['error']}")
            continue
        ratio = r["ms_per_step"] / eager[r["loop"]] if eager.get(r["loop"]) else float("nan")
        lines.append(" | ".join((
            r["backend"], r["loop"],
            f"{r['ms_per_step']:.2f} [{r['ms_per_step_min']:.2f}-{r['ms_per_step_max']:.2f}]",
            f"{ratio:.3f}", f"{r['peak_gib']:.3f}", f"{r['reserved_gib']:.3f}",
            f"{r['copied_out_mib_per_step']:.1f}", str(r["captures_timed"]),
            f"{r['max_grad_err']:.1e}" if r.get("grad_check_failed") is None
            else "failed: " + r["grad_check_failed"][:60])))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="heavy")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--out", default=".")
    ap.add_argument("--smoke", action="store_true", help="a tiny model on CPU, no reduce-overhead")
    ap.add_argument("--case", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.case:
        backend, loop = a.case.split(":")
        print(json.dumps(run_case(backend, loop, a.model, a.seq, a.reps, a.steps, a.smoke)))
        return
    rows = []
    for backend in BACKENDS[:2] if a.smoke else BACKENDS:
        for loop in LOOPS:
            cmd = [sys.executable, __file__, "--case", f"{backend}:{loop}", "--model", a.model,
                   "--seq", str(a.seq), "--reps", str(a.reps), "--steps", str(a.steps),
                   *(["--smoke"] if a.smoke else [])]
            p = subprocess.run(cmd, capture_output=True, text=True)
            try:
                row = json.loads(p.stdout.strip().splitlines()[-1])
            except (IndexError, json.JSONDecodeError):
                row = {"error": (p.stderr.strip().splitlines() or ["no output"])[-1][:300]}
            rows.append({"backend": backend, "loop": loop, **row})
            print(f"{backend} {loop}: {row}", flush=True)
    print(table(rows))
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, f"held-output-{a.model}.json"), "w") as fh:
        json.dump({"model": a.model, "seq": a.seq, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
