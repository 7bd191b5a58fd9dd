"""Run 56 probe: the shared graph pool of one benchmark case at one shape, with the pool's room
(``SharedPool.make_room``) and ``passes/share.py`` each on or off: how many bytes each capture
holds at once (the allocator's trace between capture start and end), the pool's segments, and
reserved / peak allocated at the end, with the gradients' distance from eager's.

    python benchmarks/results/h200-run56/pools.py llama-large 2048 room=1 share=1
"""
import json
import logging
import sys

import torch

sys.path.insert(0, "benchmarks")
from bench_plan import MODELS  # noqa: E402
from bench_work import Workload, compile_case, make_step, mark_for, with_zero_grad  # noqa: E402

import fxslots.backend as B  # noqa: E402
from fxslots.runtime.cudagraphs import executor as E, pool as P  # noqa: E402

model, seq = sys.argv[1], int(sys.argv[2])
flags = dict(a.split("=") for a in sys.argv[3:])
if flags.get("room") == "0":
    E.room_for = lambda graphs: 0
if flags.get("share") == "0":
    B.share_slot = lambda fw: 0
logging.getLogger("fxslots.runtime.cudagraphs.pool").setLevel(logging.INFO)
logging.basicConfig(format="%(message)s")
torch.cuda.memory._record_memory_history(max_entries=400_000)
windows = []
orig = P.CudaCapturer.capture


def events():
    return [e for t in torch.cuda.memory._snapshot()["device_traces"] for e in t]


def capture(self, gm, args, room=0):
    start = len(events())
    out = orig(self, gm, args, room)
    windows.append((start, len(events()), room))
    return out


P.CudaCapturer.capture = capture
work = Workload(MODELS[model], "cuda", seqs=(seq,), microbatches=4)
f = compile_case(work.model, "fxslots", {"slots": 1}, None)
run = with_zero_grad(make_step("sequential", work, mark_for("fxslots")), work.model, "sequential")
for k in range(4):
    run(f, k)
torch.cuda.synchronize()
ev = events()
MiB = 2**20
for n, (a, b, room) in enumerate(windows):
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
    print(f"capture {n} (room {room / MiB:.0f} MiB): at most {peak / MiB:.1f} MiB at once; "
          f"largest blocks then (MiB): {[round(s / MiB, 1) for s in sizes[:6]]}")
from fxslots import state  # noqa: E402
from fxslots.passes.lifetimes import allocated_peak  # noqa: E402
from fxslots.runtime.variant import Direction  # noqa: E402

for r in state.regions.values():
    for v in r.live_variants():
        d = v.deliver
        ov = d.overlay.graph if d is not None and d.overlay is not None else None
        peaks = {k: round(allocated_peak(g)[0] / MiB, 1) for k, g in (
            ("forward", v.forward_graph), ("delivering forward", v.runner(
                Direction.FORWARD, deliver=v.deliver_forward is not None)),
            ("plain backward", v.backward_graph),
            ("delivering", d.graph if d is not None else None), ("borrowing", ov))
            if isinstance(g, torch.fx.GraphModule)}
        print(f"{v.name} nodes' peaks (MiB): {peaks}; gradients in the arena: "
              f"{r.grads_in_arena()}")
segs = [s for s in torch.cuda.memory_snapshot() if tuple(s["segment_pool_id"]) != (0, 0)]
print(json.dumps(dict(model=model, seq=seq, **flags,
                      pool_segments_mib=[round(s["total_size"] / MiB, 1) for s in segs],
                      pool_mib=round(sum(s["total_size"] for s in segs) / MiB, 1),
                      reserved_gib=round(torch.cuda.memory_reserved() / 2**30, 3),
                      max_allocated_gib=round(torch.cuda.max_memory_allocated() / 2**30, 3))))
