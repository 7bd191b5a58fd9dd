"""Run 30c probe: how many bytes each CUDA graph capture of a benchmark case holds at once in
the shared pool (what sizes the pool), from the allocator's trace between capture start and end.

    python benchmarks/results/h200-run30/capture_pools.py heavy sequential '{"slots": 1}' 2048
"""
import json
import sys

import torch

sys.path.insert(0, "benchmarks")
from bench_plan import MODELS  # noqa: E402
from bench_work import Workload, compile_case, make_step, mark_for, with_zero_grad  # noqa: E402

from fxslots.runtime.cudagraphs import pool as P  # noqa: E402

model, schedule, options, seq = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
torch.cuda.memory._record_memory_history(max_entries=400_000)
windows = []
orig = P.CudaCapturer.capture


def events():
    return [e for t in torch.cuda.memory._snapshot()["device_traces"] for e in t]


def capture(self, gm, args):
    start = len(events())
    out = orig(self, gm, args)
    windows.append((start, len(events()), len([a for a in args if isinstance(a, torch.Tensor)])))
    return out


P.CudaCapturer.capture = capture
work = Workload(MODELS[model], "cuda", seqs=(seq,), microbatches=4)
f = compile_case(work.model, "fxslots", options, None)
run = with_zero_grad(make_step(schedule, work, mark_for("fxslots")), work.model, schedule)
for k in range(4):
    run(f, k)
torch.cuda.synchronize()
ev = events()
MiB = 2**20
for n, (a, b, nargs) in enumerate(windows):
    live, total, peak, at_peak = {}, 0, 0, {}
    for e in ev[a:b]:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
            total += e["size"]
            if total > peak:
                peak, at_peak = total, dict(live)
        elif e["action"] == "free_requested" and e["addr"] in live:
            total -= live.pop(e["addr"])
    sizes = sorted(at_peak.values(), reverse=True)
    print(f"capture {n} ({nargs} tensor args): at most {peak / MiB:.1f} MiB at once; largest "
          f"blocks then (MiB): {[round(s / MiB, 1) for s in sizes[:8]]}")
segs = [s for s in torch.cuda.memory_snapshot() if tuple(s["segment_pool_id"]) != (0, 0)]
print("graph pool segments (MiB):", [round(s["total_size"] / MiB, 1) for s in segs])
