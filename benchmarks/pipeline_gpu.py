"""Pipeline parallelism on 2 GPUs: torch.distributed.pipelining (NCCL) with fxslots stages.

The Llama-style model of examples/llama.py (bf16), split into 2 stages (Schedule1F1B) or 4
chunks, 2 per rank (ScheduleInterleaved1F1B); 8 microbatches of batch 2; 2 sequence lengths,
one schedule each, taken in turn step after step. Cases per schedule:
  eager              the stages as they are
  reduce-overhead    each stage torch.compile(mode="reduce-overhead")
  fxslots            each stage compiled with fxslots (CUDA graphs), slots and arena groups
                     from the schedule (fxslots.pipelining.compile_stages)
  fxslots-per-chunk  (interleaved) the same with one ring per chunk instead of one per rank
Per rank (one stage, or two chunks): ms per step (median of the timed repetitions, with min and
max), peak allocated and reserved memory, fxslots captures, slot arena bytes against the
schedule's in-flight count x the largest frame, and the largest gradient error relative to
eager. Each case runs in its own 2 processes (clean memory; a case that fails or hangs cannot
take the others down). Prints a table, writes JSON.

    python benchmarks/pipeline_gpu.py benchmarks/results/h200-pipeline.json     # 2 GPUs, NCCL
    python benchmarks/pipeline_gpu.py /tmp/p.json --cpu --tiny                  # CPU, gloo
    python benchmarks/pipeline_gpu.py all.json --merge 1f1b.json interleaved.json
    python benchmarks/pipeline_gpu.py all.json --show                           # markdown
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CASES = {"1f1b": ["eager", "fxslots", "reduce-overhead"],
         "interleaved": ["eager", "fxslots", "fxslots-per-chunk", "reduce-overhead"]}
MICROBATCHES, MB_BATCH = 8, 2


def settings(args) -> dict:
    tiny = args.tiny
    return {"device": "cpu" if args.cpu else "cuda",
            "size": "llama-tiny" if tiny else "llama-small", "layers": args.layers,
            "seqs": (16, 32) if tiny else (256, 512), "warmup": args.warmup, "reps": args.reps,
            "timeout_s": args.case_timeout}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="where to write the JSON results")
    ap.add_argument("--cpu", action="store_true", help="gloo on CPU instead of NCCL on 2 GPUs")
    ap.add_argument("--tiny", action="store_true", help="llama-tiny, sequences 16 and 32")
    ap.add_argument("--schedules", default=",".join(CASES))
    ap.add_argument("--cases", default=None, help="a comma list; default: all of a schedule's")
    ap.add_argument("--layers", type=int, default=None, help="override the model's layers")
    ap.add_argument("--warmup", type=int, default=3,
                    help="untimed repetitions at least (then until one captures nothing)")
    ap.add_argument("--reps", type=int, default=7, help="timed repetitions (2 steps each)")
    ap.add_argument("--case-timeout", type=float, default=300)
    ap.add_argument("--append", action="store_true",
                    help="keep the rows already in OUT (another call's schedules or cases)")
    ap.add_argument("--show", action="store_true",
                    help="only print OUT's results, as a markdown table and the targets")
    ap.add_argument("--merge", nargs="+", metavar="JSON",
                    help="only write into OUT the rows of these results files, in order")
    args = ap.parse_args()
    if args.merge:
        with open(args.merge[0]) as fh:
            cfg = json.load(fh)["settings"]
        _write(args.out, [r for path in args.merge for r in _read(path)], cfg)
        return
    if args.show:
        rows = _read(args.out)
        print(table(rows, markdown=True))
        print(summary(rows))
        return
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # NVLink multicast stays off on the lent machines
    cfg = settings(args)
    rows: list[dict] = _read(args.out) if args.append else []
    with tempfile.TemporaryDirectory() as work:
        for sched in args.schedules.split(","):
            for case in CASES[sched]:
                if args.cases and case not in args.cases.split(","):
                    continue
                rows += run_case(cfg, sched, case, work)
                for r in rows[-2:]:
                    print(_fmt(r), flush=True)
                _write(args.out, rows, cfg)  # after every case: a cut-short run keeps its rows
    print()
    print(table(rows))
    print(summary(rows))
    print(f"\nwrote {args.out}")


def run_case(cfg: dict, sched: str, case: str, work: str) -> list[dict]:
    """One case on 2 fresh ranks: one row per rank, or rows carrying the error."""
    from pipeline_ranks import worker

    from examples.spawn import launch

    t0 = time.perf_counter()
    try:
        launch(worker, 2, cfg, sched, case, work, timeout_s=cfg["timeout_s"])
        error = None
    except Exception as e:  # noqa: BLE001 - a failing case is a row, not a crash
        error = f"{type(e).__name__}: {_last_line(str(e))}"
    rows = []
    for rank in range(2):
        path = os.path.join(work, f"{sched}-{case}-rank{rank}.json")
        row = _read(path) if os.path.exists(path) else {
            "schedule": sched, "case": case, "rank": rank}
        row["error"] = row.get("error") or error
        row["case_s"] = time.perf_counter() - t0
        rows.append(row)
    return rows


def _read(path: str):
    with open(path) as fh:
        data = json.load(fh)
    return data["rows"] if isinstance(data, dict) and "rows" in data else data


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "")[:300]


def _write(out: str, rows: list[dict], cfg: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as fh:
        json.dump({"settings": cfg, "rows": rows}, fh, indent=1)


def _fmt(r: dict) -> str:
    return json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()
                       if k not in ("arena_bytes",)})


def _captures(r: dict) -> str:
    """All captures, and in parentheses those made in the timed steps (and recaptures of a
    graph whose unstaged input moved): a steady pipeline makes none there."""
    if r.get("captures") is None:
        return "-"
    timed = r.get("captures_timed")
    return f"{r['captures']}" + ("" if timed is None else f" ({timed})")


def table(rows: list[dict], markdown: bool = False) -> str:
    head = ("schedule", "case", "rank", "ms/step", "min-max", "x eager", "x r-o", "peak GiB",
            "reserved", "captures (timed)", "slots", "slot MiB", "x frames", "grad err", "error")
    lines = [_line(r, rows) for r in rows]
    if markdown:
        return "\n".join("| " + " | ".join(map(str, x)) + " |"
                         for x in [head, ["---"] * len(head), *lines])
    widths = [max(len(str(x[i])) for x in [head, *lines]) for i in range(len(head))]
    fmt = " | ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*head), fmt.format(*("-" * w for w in widths))]
                     + [fmt.format(*x) for x in lines])


def _line(r: dict, rows: list[dict]) -> tuple:
    def ratio(case):
        ref = _row(rows, r["schedule"], case, r["rank"])
        return "-" if ref is None or not r.get("ms_per_step") else \
            f"{r['ms_per_step'] / ref['ms_per_step']:.2f}"

    def f(k, fmt):
        return "-" if r.get(k) is None else format(r[k], fmt)

    spread = "-" if r.get("ms_min") is None else f"{r['ms_min']:.1f}-{r['ms_max']:.1f}"
    return (r["schedule"], r["case"], r["rank"], f("ms_per_step", ".2f"), spread,
            ratio("eager"), ratio("reduce-overhead"), f("peak_alloc_gib", ".2f"),
            f("reserved_gib", ".2f"), _captures(r), f("slots", "d"),
            "-" if r.get("slot_bytes") is None else f"{r['slot_bytes'] / 2**20:.1f}",
            f("slots_x_saved_ratio", ".3f"), f("max_grad_err", ".1e"),
            (r.get("error") or "")[:70])


def _row(rows: list[dict], sched: str, case: str, rank: int) -> dict | None:
    return next((x for x in rows if x["schedule"] == sched and x["case"] == case
                 and x["rank"] == rank and x.get("ms_per_step")), None)


def summary(rows: list[dict]) -> str:
    """The issue's targets per schedule and rank, and for interleaved the slot arena bytes of
    one coloured ring per rank against one ring per chunk (measured, and the plan's)."""
    out = []
    for r in rows:
        if r["case"] != "fxslots" or not r.get("ms_per_step"):
            continue
        eager = _row(rows, r["schedule"], "eager", r["rank"])
        ro = _row(rows, r["schedule"], "reduce-overhead", r["rank"])
        parts = [f"{r['schedule']} rank {r['rank']}:"]
        if eager:
            parts.append(f"x eager {r['ms_per_step'] / eager['ms_per_step']:.2f} (<= 0.8)")
        if ro:
            parts.append(f"x reduce-overhead {r['ms_per_step'] / ro['ms_per_step']:.2f} (<= 1.0)")
        parts.append(f"grad err {r.get('max_grad_err')}; slots x saved "
                     f"{r.get('slots_x_saved_ratio')} (<= 1.05)")
        per = _row(rows, r["schedule"], "fxslots-per-chunk", r["rank"])
        if per and per.get("slot_bytes"):
            parts.append(f"arenas coloured {r['slot_bytes']} B ({r['slots']} slots) vs per chunk "
                         f"{per['slot_bytes']} B ({per['slots']} slots) = "
                         f"{r['slot_bytes'] / per['slot_bytes']:.2f}x; plan from per-chunk "
                         f"frames {per.get('plan_report')}")
        out.append(" ".join(parts))
    return "\n".join(out)


if __name__ == "__main__":
    main()
