"""Run 57c probe: at each CUDA graph capture of a uniform sequential loop, which graph is
captured (forward, plain / delivering / borrowing backward), the room asked for, and the region's
state (gradients in the arena?, evictions), then the counters of bytes placed in the arena.
Usage: PYTHONPATH=. python3 captured.py MODEL [SEQ]"""
import sys

import torch

import fxslots
from benchmarks.bench_plan import MODELS
from benchmarks.bench_work import Workload, compile_case, make_step, with_zero_grad
from fxslots.runtime.cudagraphs import executor, room
from fxslots.runtime.variant import BORROWS, Direction

capturer = executor.CudaCapturer
original = capturer.capture


def which(gm):
    for r in fxslots.regions():
        for v in r.live_variants():
            for name, kw in (("forward", dict(direction=Direction.FORWARD)),
                             ("forward-delivering", dict(direction=Direction.FORWARD,
                                                         deliver=True)),
                             ("backward", dict(direction=Direction.BACKWARD)),
                             ("backward-delivering", dict(direction=Direction.BACKWARD,
                                                          deliver=True)),
                             ("backward-borrowing", dict(direction=Direction.BACKWARD,
                                                         deliver=BORROWS))):
                try:
                    if v.runner(kw.pop("direction"), **kw) is gm:
                        return f"{v.name} {name}"
                except Exception:  # noqa: BLE001
                    pass
    return "?"


def capture(self, gm, args, room_bytes=0):
    for r in fxslots.regions():
        state = [(v.name, v.deliver is not None and v.deliver.overlay is not None
                  and v.deliver.overlay.graph is not None) for v in r.live_variants()]
        print(f"capture {which(gm)}: room {room_bytes / 2**20:.0f} MiB; in_arena "
              f"{r.grads_in_arena()} dropped {r.grads_dropped} kept {r.grads_kept} evictions "
              f"{r.ring.evictions}; borrow graph per variant {state}", flush=True)
    out = original(self, gm, args, room_bytes)
    print(f"   pool reserved now {torch.cuda.memory_reserved() / 2**20:.0f} MiB total", flush=True)
    return out


capturer.capture = capture
model = sys.argv[1]
seqs = (int(sys.argv[2]),) if len(sys.argv) > 2 else None
work = Workload(MODELS[model], "cuda", seqs=seqs)
f = compile_case(work.model, "fxslots", {"slots": 1}, None)
run = with_zero_grad(make_step("sequential", work, lambda: None), work.model, "sequential")
for k in range(6):
    print("step", k, flush=True)
    run(f, k)
    torch.cuda.synchronize()
print({k: v for k, v in fxslots.counters.items() if "arena" in k or "capture" in k})
