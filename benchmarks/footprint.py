"""Where a training loop's reserved GPU memory is (issue 10, item 6): segment by segment, the
caching allocator's pools, what is allocated in each and where it was allocated.

    python benchmarks/footprint.py --model llama-small --schedule accum --backend fxslots
    python benchmarks/footprint.py --model llama-small --schedule accum --backend eager

Runs ``--steps`` steps of the schedule (benchmarks/bench_work.py's) with the allocator's history
recorded from the start, then prints per pool its reserved, allocated and free bytes, and for
every default-pool segment that is partly free (memory no other pool can use, held by a live
block), its live blocks and the first frame that allocated each. Then the moment allocated
bytes were at their most (the peak the benchmark reports, warm-up included): at which step,
and the blocks live then by allocation site. JSON goes to ``--out``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_plan import MODELS  # noqa: E402
from bench_work import (Workload, compile_case, make_step, mark_for,  # noqa: E402
                        steps_per_pass, with_zero_grad)

GIB = 2**30
_OURS = ("fxslots/", "benchmarks/", "examples/", "torch/autograd/", "torch/_functorch/")


def site(block: dict) -> str:
    """The first frame of ours (or autograd's) that allocated ``block``."""
    for f in block.get("frames", []):
        name = f.get("filename", "")
        if any(k in name for k in _OURS):
            return f"{name.split('/site-packages/')[-1]}:{f.get('line')} {f.get('name')}"
    return "?"


def summarize(snapshot: dict) -> dict:
    pools: dict[str, dict] = collections.defaultdict(lambda: dict(total=0, allocated=0, n=0))
    partial = []
    for seg in snapshot["segments"]:
        pool = "default" if tuple(seg.get("segment_pool_id", (0, 0))) == (0, 0) else "graph"
        p = pools[pool]
        p["total"] += seg["total_size"]
        p["allocated"] += seg["allocated_size"]
        p["n"] += 1
        free = seg["total_size"] - seg["allocated_size"]
        if pool == "default" and free and seg["allocated_size"]:
            live = [b for b in seg["blocks"] if b["state"] == "active_allocated"]
            partial.append(dict(total=seg["total_size"], free=free, blocks=[
                dict(size=b["size"], site=site(b)) for b in live]))
    partial.sort(key=lambda s: -s["free"])
    return dict(pools=dict(pools), partly_free=partial)


def at_peak(snapshot: dict, marks: list[int]) -> dict:
    """The moment allocated bytes peaked, replayed from the allocator's trace: the step it fell
    in (``marks``: how many trace events each step had ended with) and the live bytes then,
    by allocation site (ours, and the frame that asked)."""
    live: dict[int, tuple[int, str]] = {}
    total = best = best_at = 0
    best_live: dict[int, tuple[int, str]] = {}
    events = [e for trace in snapshot.get("device_traces", []) for e in trace]
    for i, e in enumerate(events):
        if e["action"] == "alloc":
            first = (e.get("frames") or [{}])[0]
            live[e["addr"]] = (e["size"], f"{site(e)} <- {first.get('filename', '?')}:"
                                          f"{first.get('line')} {first.get('name')}")
            total += e["size"]
            if total > best:
                best, best_at, best_live = total, i, dict(live)
        elif e["action"] == "free_requested" and e["addr"] in live:
            total -= live.pop(e["addr"])[0]
    by_site: collections.Counter = collections.Counter()
    for size, where in best_live.values():
        by_site[where] += size
    step = next((k for k, m in enumerate(marks) if best_at < m), len(marks))
    return dict(peak=best, step=step, by_site=by_site.most_common(16), events=len(events))


def grown(snapshot: dict, marks: list[int]) -> list[dict]:
    """Every segment the allocator reserved from the driver, in order: the step, its pool, its
    size and the allocation that asked for it (site and first frame). Reserved memory is the sum
    of these less the segments freed, so this says what each reserved byte was for."""
    events = [e for trace in snapshot.get("device_traces", []) for e in trace]
    pools = {seg["address"]: "default" if tuple(seg.get("segment_pool_id", (0, 0))) == (0, 0)
             else "graph" for seg in snapshot["segments"]}
    rows = []
    for i, e in enumerate(events):
        if e["action"] not in ("segment_alloc", "segment_free"):
            continue
        first = (e.get("frames") or [{}])[0]
        pool = pools.get(e["addr"], "gone")
        rows.append(dict(action=e["action"], size=e["size"], pool=pool,
                         step=next((k for k, m in enumerate(marks) if i < m), len(marks)),
                         site=f"{site(e)} <- {first.get('filename', '?')}:{first.get('line')} "
                              f"{first.get('name')}"))
    return rows


def report(summary: dict) -> str:
    lines = ["pool     segments  reserved GiB  allocated GiB  free GiB"]
    for name, p in summary["pools"].items():
        lines.append(f"{name:<8} {p['n']:>8}  {p['total'] / GIB:>12.3f}  "
                     f"{p['allocated'] / GIB:>13.3f}  {(p['total'] - p['allocated']) / GIB:>8.3f}")
    held = sum(s["free"] for s in summary["partly_free"])
    lines.append(f"\ndefault-pool segments partly free: {len(summary['partly_free'])}, "
                 f"{held / GIB:.3f} GiB free in them (held by their live blocks)")
    by_site: collections.Counter = collections.Counter()
    for seg in summary["partly_free"]:
        for b in seg["blocks"]:
            by_site[b["site"]] += seg["free"] / len(seg["blocks"])
    for where, nbytes in by_site.most_common(12):
        lines.append(f"  {nbytes / GIB:8.3f} GiB free beside blocks from {where}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama-small", choices=sorted(MODELS))
    ap.add_argument("--schedule", default="accum")
    ap.add_argument("--backend", default="fxslots")
    ap.add_argument("--options", default="{}", help="fxslots options, as JSON")
    ap.add_argument("--steps", type=int, default=None,
                    help="default: two passes over the variants and two steps more, the steady "
                         "state (heavy's four variants need 10: its arena grows at the fourth "
                         "step and the first captures go stale, run 58b)")
    ap.add_argument("--seq", type=int, default=None, help="one sequence length (the offload "
                    "part's runs): default, the model's variants")
    ap.add_argument("--out", default="footprint-out")
    a = ap.parse_args()
    torch.cuda.memory._record_memory_history(max_entries=200_000)
    work = Workload(MODELS[a.model], "cuda", seqs=(a.seq,) if a.seq else None, microbatches=4)
    f = compile_case(work.model, a.backend, json.loads(a.options), None)
    run = with_zero_grad(make_step(a.schedule, work, mark_for(a.backend)), work.model,
                         a.schedule)
    marks = []
    for k in range(a.steps or 2 * steps_per_pass(a.schedule, work) + 2):
        run(f, k)
        torch.cuda.synchronize()
        marks.append(sum(len(t) for t in torch.cuda.memory._snapshot()["device_traces"]))
    snapshot = torch.cuda.memory._snapshot()
    summary = summarize(snapshot)
    summary["at_peak"] = peak = at_peak(snapshot, marks)
    summary["grown"] = segments = grown(snapshot, marks)
    summary.update(model=a.model, schedule=a.schedule, backend=a.backend, options=a.options,
                   reserved=torch.cuda.memory_reserved())
    print(f"{a.model} {a.schedule} {a.backend} {a.options}: reserved "
          f"{summary['reserved'] / GIB:.3f} GiB")
    print(report(summary))
    print(f"\nallocated at its most: {peak['peak'] / GIB:.3f} GiB, in step {peak['step']} "
          f"(max_memory_allocated {torch.cuda.max_memory_allocated() / GIB:.3f}); live then:")
    for where, nbytes in peak["by_site"]:
        print(f"  {nbytes / GIB:8.3f} GiB  {where}")
    print("\nsegments reserved (+) and released (-), by the allocation that asked:")
    for g in segments:
        sign = "+" if g["action"] == "segment_alloc" else "-"
        print(f"  step {g['step']} {g['pool']:<7} {sign}{g['size'] / 2**20:8.1f} MiB  {g['site']}")
    os.makedirs(a.out, exist_ok=True)
    name = f"{a.model}-{a.schedule}-{a.backend}".replace("/", "_")
    with open(os.path.join(a.out, name + ".json"), "w") as fh:
        json.dump(summary, fh, indent=1)


if __name__ == "__main__":
    main()
