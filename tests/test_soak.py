"""Soak (issue 4, part 4): 10,000 CPU steps cycling shape variants and F/B schedules with the
debug checks on; after warm-up nothing grows: arenas (bytes, addresses, slot count), Python
objects (``gc.get_objects()``), traced Python memory (``tracemalloc``), process RSS, compiles.

``FXSLOTS_SOAK_STEPS`` sets the number of steps (default 10,000: about 15 s on 2 cores).
Pinned host memory is not checked: offload is not implemented yet, so fxslots allocates none.
"""

from __future__ import annotations

import copy
import gc
import os
import time
import tracemalloc

import torch
from torch import nn

import fxslots

STEPS = int(os.environ.get("FXSLOTS_SOAK_STEPS", "10000"))
WARMUP = min(500, STEPS // 4)
CHECK_EVERY = 97  # compare gradients with eager on these steps

BATCHES = (2, 3, 5)  # dynamic=False: three variants in one ring
SCHEDULES = (
    ("F0", "B0"),
    ("F0", "F1", "B0", "B1"),
    ("F0", "F1", "B1", "F2", "B0", "B2"),
    ("F0", "F1", "F2", "B2", "B0", "B1"),
    ("F0", "F1", "D0", "F2", "B1", "B2"),  # D: microbatch dropped without a backward
)


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def _arena_state() -> list[tuple]:
    return [(r.name, s.index, s.nbytes, s.arena.data_ptr() if s.arena is not None else 0,
             s.generation) for r in [g.ring for g in fxslots.regions()] for s in r.slots]


def _layouts() -> int:
    return sum(len(v.layouts) for g in fxslots.regions() for v in g.live_variants())


def test_soak_no_growth():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
    eager = copy.deepcopy(model)
    c = torch.compile(model, backend="fxslots", options={"slots": 3, "debug": True},
                      dynamic=False)
    gen = torch.Generator().manual_seed(0)
    xs = {n: [torch.randn(n, 8, generator=gen) for _ in range(4)] for n in BATCHES}

    def step(i: int, fn) -> None:
        live = {}
        for ev in SCHEDULES[i % len(SCHEDULES)]:
            mb = int(ev[1])
            if ev[0] == "F":
                n = BATCHES[(i + mb) % len(BATCHES)]
                live[mb] = fn(xs[n][(i // 3 + mb) % 4])
            elif ev[0] == "B":
                live.pop(mb).sum().backward()
            else:
                del live[mb]
        assert not live

    def checked_step(i: int) -> None:
        model.zero_grad(set_to_none=False)
        eager.zero_grad(set_to_none=False)
        step(i, c)
        step(i, eager)
        for (name, p), q in zip(model.named_parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6,
                                       msg=lambda m: f"step {i}, {name}: {m}")

    t0 = time.perf_counter()
    for i in range(WARMUP):
        step(i, c)
    checked_step(WARMUP)
    gc.collect()
    compiles, rings = fxslots.counters["compiles"], len(fxslots.regions())
    arenas, layouts = _arena_state(), _layouts()
    assert compiles == len(BATCHES) and len(arenas) == 3, (compiles, arenas)
    objects = len(gc.get_objects())
    rss = _rss_bytes()
    tracemalloc.start()
    traced0 = tracemalloc.get_traced_memory()[0]
    samples = []
    try:
        for i in range(WARMUP + 1, STEPS):
            if i % CHECK_EVERY == 0:
                checked_step(i)
            else:
                step(i, c)
            if i % 1000 == 0 or i == STEPS - 1:
                gc.collect()
                samples.append((i, len(gc.get_objects()) - objects,
                                tracemalloc.get_traced_memory()[0] - traced0,
                                _rss_bytes() - rss))
        gc.collect()
        traced = tracemalloc.get_traced_memory()[0] - traced0
    finally:
        tracemalloc.stop()
    seconds = time.perf_counter() - t0
    print(f"soak: {STEPS} steps in {seconds:.1f} s; (step, objects, traced bytes, rss bytes) "
          f"growth since warm-up: {samples}")

    assert fxslots.counters["compiles"] == compiles, "recompiled after warm-up"
    assert len(fxslots.regions()) == rings
    assert _arena_state() == arenas, "an arena grew, moved or was reallocated after warm-up"
    assert _layouts() == layouts
    assert sum(r.pending() for r in [g.ring for g in fxslots.regions()]) == 0
    objects_growth = len(gc.get_objects()) - objects
    assert objects_growth < 500, f"{objects_growth} more Python objects after {STEPS} steps"
    assert traced < 512 * 1024, f"traced Python memory grew by {traced} bytes"
    slope = samples[-1][2] - samples[0][2]  # after the first 1000 steps, nothing may build up
    assert slope < 64 * 1024, f"traced Python memory keeps growing: {samples}"
    assert _rss_bytes() - rss < 64 * 2**20, f"RSS grew by {_rss_bytes() - rss} bytes"
