"""Reliability on the GPU (issue 4, parts 1-4 where they need CUDA). Run on the H200:

    python3 -m pytest -q -m cuda tests/test_cuda_reliability.py

- the schedule fuzzer on ``device="cuda"`` with CUDA graphs (tolerance instead of bitwise);
- recovery from a failed capture (allocator, pool and arenas as before; a retry succeeds);
- an out-of-memory while growing an arena (raises with the bytes asked; old variants train);
- mixed devices; a short soak with captures.

Needs torch and pytest only (no hypothesis, no expecttest): the fuzzer draws from seeded
``random.Random`` here. ``FXSLOTS_FUZZ_GPU_EXAMPLES`` sets the number of fuzz seeds (default 40).
"""

from __future__ import annotations

import copy
import gc
import os
import re
import warnings

import pytest
import torch
from torch import nn

import fxslots
from tests.fuzz_models import RandomDraw, check_case, draw_case

pytestmark = pytest.mark.cuda

GPU_EXAMPLES = int(os.environ.get("FXSLOTS_FUZZ_GPU_EXAMPLES", "40"))


def rings():
    return list([g.ring for g in fxslots.regions()])


def pending() -> int:
    return sum(r.pending() for r in rings())


def arena_state() -> list[tuple[int, int, int]]:
    return [(s.index, s.nbytes, s.arena.data_ptr() if s.arena is not None else 0)
            for r in rings() for s in r.slots]


def settled_allocated() -> int:
    gc.collect()
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated()


def assert_close_grads(got: nn.Module, want: nn.Module, rtol=1e-5, atol=1e-5) -> None:
    if os.environ.get("FXSLOTS_KERNELS") == "inductor":  # fused kernels sum in another order
        rtol, atol = max(rtol, 1e-4), max(atol, 1e-4)
    for (name, p), q in zip(got.named_parameters(), want.parameters(), strict=True):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, rtol=rtol, atol=atol,
                                       msg=lambda m: f"{name}: {m}")


# ----------------------------------------------------------------------------- fuzz profile


@pytest.mark.cuda
@pytest.mark.parametrize("seed", range(GPU_EXAMPLES))
def test_fuzz_cuda(seed):
    """The CPU fuzzer's grammar and schedules on CUDA, CUDA graphs on (the default)."""
    case = draw_case(RandomDraw(10_000 + seed), max_ops=5, max_variants=3, max_schedules=3)
    print(f"repro: python3 -c \"from tests.fuzz_models import *; "
          f"check_case({case!r}, device='cuda')\"")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_case(case, device="cuda", exact=False, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- capture failure


@torch.library.custom_op("fxslots_cuda_reliability::host_sync", mutates_args=())
def host_sync(x: torch.Tensor) -> torch.Tensor:
    """A host synchronisation inside the graph: legal eagerly, illegal during a capture."""
    if x.sum().item() != x.sum().item():  # .item() copies to the host and waits
        raise AssertionError("unreachable")
    return x.clone()


@host_sync.register_fake
def _(x):
    return torch.empty_like(x)


host_sync.register_autograd(lambda ctx, g: g)


class MaybeSyncs(nn.Module):
    def __init__(self, d: int = 64):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(d, d), nn.Linear(d, d)
        self.sync = False

    def forward(self, x):
        h = torch.tanh(self.a(x))
        if self.sync:  # Dynamo guards on it: flipping it compiles a second variant
            h = host_sync(h)
        return torch.tanh(self.b(h))


def _step(fn, x) -> torch.Tensor:
    out = fn(x)
    out.sum().backward()
    return out.detach()


@pytest.mark.cuda
def test_failed_capture_leaves_everything_as_it_was_and_a_retry_succeeds():
    eager, model = MaybeSyncs().cuda(), MaybeSyncs().cuda()
    c = torch.compile(model, backend="fxslots", options={"slots": 2}, dynamic=False)
    xs = [torch.randn(8, 64, device="cuda", generator=torch.Generator("cuda").manual_seed(i))
          for i in range(8)]
    for x in xs[:3]:  # warm-up, capture, replay
        _step(c, x)
        _step(eager, x)
    assert fxslots.counters["captures"] > 0, "the model was never captured"
    model.sync = eager.sync = True
    error = None
    for x in xs[3:6]:  # the new variant warms up uncaptured, then its capture fails
        arenas, captures = arena_state(), fxslots.counters["captures"]
        before = settled_allocated()
        try:
            _step(c, x)
        except fxslots.CaptureError as e:
            error = str(e)
            break
        _step(eager, x)
    assert error is not None, "capturing a graph with a host sync did not fail"
    assert _names_the_sync(error) and "'on_capture_failure'" in error, error
    # The failed capture left the RNG in capture mode (torch 2.11): eager dropout raised.
    torch.nn.functional.dropout(torch.ones(4, device="cuda"), 0.5)
    # Less is fine (a capture starts by dropping cuBLAS's cached workspaces); more is a leak.
    assert settled_allocated() <= before, "the failed capture kept device memory"
    assert arena_state() == arenas, "the failed capture changed the arenas"
    assert pending() == 0, "the failed forward kept its slot"
    assert fxslots.counters["captures"] == captures
    # Training goes on with the variant that captured.
    model.sync = eager.sync = False
    for x in xs[6:8]:
        _step(c, x)
        _step(eager, x)
    assert_close_grads(model, eager)
    # The retry with on_capture_failure="eager" runs the graph uncaptured and matches eager.
    retry_model = copy.deepcopy(model)
    retry_eager = copy.deepcopy(eager)
    retry_model.sync = retry_eager.sync = True
    c2 = torch.compile(retry_model, backend="fxslots", dynamic=False,
                       options={"slots": 2, "on_capture_failure": "eager"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for x in xs[:4]:
            torch.testing.assert_close(_step(c2, x), _step(retry_eager, x))
    assert any(_names_the_sync(str(w.message)) for w in caught), [str(w.message) for w in caught]
    assert_close_grads(retry_model, retry_eager)


def _names_the_sync(message: str) -> bool:
    """Under kernels="inductor" (FXSLOTS_KERNELS) the sync runs inside Inductor's code: there
    is no node to name."""
    return "host_sync" in message or "a call of Inductor's code" in message


# ----------------------------------------------------------------------------- arena OOM


@pytest.mark.cuda
def test_out_of_memory_while_growing_an_arena():
    d = 1024
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(d, d), nn.Tanh(), nn.Linear(d, d), nn.Tanh()).cuda()
    eager = copy.deepcopy(model)
    c = torch.compile(model, backend="fxslots", options={"slots": 1}, dynamic=False)
    small = [torch.randn(64, d, device="cuda") for _ in range(3)]
    big = torch.randn(65536, d, device="cuda")  # 256 MiB; its arena needs several times that
    for x in small:
        _step(c, x)
        _step(eager, x)
    margin = 192 * 2**20
    gc.collect()
    torch.cuda.empty_cache()  # cached free blocks would let the arena grow without the driver
    free, _ = torch.cuda.mem_get_info()
    hog = torch.empty(max(free - margin, 0), dtype=torch.uint8, device="cuda")
    try:
        with pytest.raises(fxslots.ArenaLimitError) as ei:
            c(big)
        msg = str(ei.value)
        assert isinstance(ei.value.__cause__, torch.OutOfMemoryError), repr(ei.value.__cause__)
        del ei
        asked = re.search(r"to (\d+) bytes", msg)
        assert asked and int(asked.group(1)) > margin, msg
        assert "ran out of memory" in msg and "max_arena_bytes" in msg, msg
        assert pending() == 0
        # The old variant still trains, with most of the memory still taken.
        for x in small:
            _step(c, x)
            _step(eager, x)
        assert_close_grads(model, eager)
    finally:
        del hog
    # Memory back: the big variant now fits and trains right.
    _step(c, big)
    _step(eager, big)
    assert_close_grads(model, eager, rtol=1e-4, atol=1e-4)


@pytest.mark.cuda
def test_arena_limit_on_cuda_refuses_before_writing():
    model = nn.Sequential(nn.Linear(64, 64), nn.Tanh()).cuda()
    c = torch.compile(model, backend="fxslots", options={"slots": 2, "max_arena_bytes": 1 << 16},
                      dynamic=False)
    for _ in range(3):
        _step(c, torch.randn(4, 64, device="cuda"))
    arenas = arena_state()
    copies = [s.arena.clone() for r in rings() for s in r.slots if s.arena is not None]
    with pytest.raises(fxslots.ArenaLimitError, match="max_arena_bytes"):
        c(torch.randn(4096, 64, device="cuda"))
    assert arena_state() == arenas
    now = [s.arena for r in rings() for s in r.slots if s.arena is not None]
    assert all(torch.equal(a, b) for a, b in zip(copies, now, strict=True))
    _step(c, torch.randn(4, 64, device="cuda"))


# ----------------------------------------------------------------------------- mixed devices


@pytest.mark.cuda
def test_mixed_devices_one_model_moved_between_devices():
    """A compiled model run on CPU, then moved to CUDA: its next forward raises FxslotsError
    naming both devices and the way out, before any arena byte is written or a slot taken;
    moved back to the CPU it trains on like eager. (One compiled model keeps its slots on one
    device: the ring was made on the first.)"""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
    eager = copy.deepcopy(model)
    c = torch.compile(model, backend="fxslots", options={"slots": 1, "debug": True})
    x = torch.randn(4, 8)
    _step(c, x)
    _step(eager, x)
    cpu_arenas = [s.arena.clone() for r in rings() for s in r.slots if s.arena is not None]
    model.cuda()
    with pytest.raises(fxslots.FxslotsError) as ei:
        _step(c, x.cuda())
    msg = str(ei.value)
    assert "ran on cuda" in msg and "after cpu" in msg and "one model per device" in msg, msg
    del ei
    now = [s.arena for r in rings() for s in r.slots if s.arena is not None]
    assert len(now) == len(cpu_arenas) and all(a.device.type == "cpu" for a in now)
    assert all(torch.equal(a, b) for a, b in zip(cpu_arenas, now, strict=True))
    assert pending() == 0
    model.cpu()
    _step(c, x * 2)
    _step(eager, x * 2)
    assert_close_grads(model, eager)


@pytest.mark.cuda
def test_capture_after_every_graph_of_the_pool_died():
    """With one slot and one variant, a bigger variant grows the only arena, which drops every
    graph captured in the pool. The pool's handle must not be used again (the allocator frees a
    pool with its last graph; reusing the handle trips ``use_count > 0 INTERNAL ASSERT``, as on
    the H200 in run 4): the next capture opens a fresh pool and trains like eager."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.Tanh()).cuda()
    eager = copy.deepcopy(model)
    c = torch.compile(model, backend="fxslots", options={"slots": 1}, dynamic=False)
    small, big = torch.randn(4, 64, device="cuda"), torch.randn(256, 64, device="cuda")
    for _ in range(3):  # warm-up, capture, replay
        _step(c, small)
        _step(eager, small)
    first = fxslots.state.pools.get(torch.cuda.current_device())
    assert first is not None and first.graphs > 0
    for _ in range(3):  # the arena grows: every graph of that pool dies, then new captures
        _step(c, big)
        _step(eager, big)
    assert first.graphs == 0
    assert fxslots.state.pools.get(torch.cuda.current_device()) is not first
    assert fxslots.counters["captures"] >= 4
    assert_close_grads(model, eager, rtol=1e-4, atol=1e-4)


@pytest.mark.cuda
def test_mixed_devices_in_one_graph():
    """Saved tensors on CPU and CUDA in one graph: the graph falls back (with a warning) and
    trains like eager; strict=True makes it an UnsupportedGraphError."""

    class Both(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.on_gpu = nn.Linear(8, 8).cuda()
            self.on_cpu = nn.Linear(8, 8)  # not "cpu": that would shadow Module.cpu()

        def forward(self, x, y):
            return torch.tanh(self.on_gpu(x)), torch.tanh(self.on_cpu(y))

    eager, model = Both(), Both()
    c = torch.compile(model, backend="fxslots", options={"slots": 2})
    xs = [(torch.randn(4, 8, device="cuda"), torch.randn(4, 8)) for _ in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fn in (c, eager):
            outs = [fn(*x) for x in xs[:2]]
            for a, b in reversed(outs):
                (a.sum() + b.sum().cuda()).backward()
            a, b = fn(*xs[2])
            (a.sum() + b.sum().cuda()).backward()
    assert_close_grads(model, eager)
    fxslots.reset()
    strict = torch.compile(Both(), backend="fxslots", options={"slots": 2, "strict": True})
    with pytest.raises(Exception) as ei:
        strict(*xs[0])
    assert "devices" in str(ei.value), str(ei.value)


# ----------------------------------------------------------------------------- bad inputs on CUDA


@pytest.mark.cuda
def test_no_grad_and_inference_mode_between_captured_microbatches():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh()).cuda()
    eager = copy.deepcopy(model)
    c = torch.compile(model, backend="fxslots", options={"slots": 1}, dynamic=False)
    xs = [torch.randn(8, 64, device="cuda") for _ in range(4)]
    for x in xs:
        out = c(x)  # holds the only slot
        for ctx in (torch.no_grad, torch.inference_mode):
            with ctx():
                torch.testing.assert_close(c(x * 2), eager(x * 2))
        out.sum().backward()
        _step(eager, x)
    assert_close_grads(model, eager)
    assert fxslots.counters["captures"] > 0


@pytest.mark.cuda
@pytest.mark.parametrize("hooks", ["save_on_cpu", "clone"])
def test_saved_tensor_hooks_that_hand_back_copies_on_cuda(hooks):
    """save_on_cpu on CUDA unpacks each saved tensor into new device memory, a cloning hook
    packs a copy: either way the backward reads copies no slot holds (``SlotRing.find``), and
    the forward's slot is free for the next one at once. Three in flight on two slots, with
    replays between, gradients accumulated: eager's."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh()).cuda()
    eager = copy.deepcopy(model)
    c = torch.compile(model, backend="fxslots", options={"slots": 2}, dynamic=False)
    ctx = (torch.autograd.graph.save_on_cpu if hooks == "save_on_cpu" else
           lambda: torch.autograd.graph.saved_tensors_hooks(lambda t: t.clone(), lambda t: t))
    for step in range(6):
        xs = [torch.randn(8, 64, device="cuda") for _ in range(3)]
        if step % 2:  # plain steps between: replays of the captured graphs
            for x in xs[:2]:
                _step(c, x)
                _step(eager, x)
            continue
        with ctx():
            outs = [c(x) for x in xs]
        for o, x in zip(outs, xs, strict=True):
            o.sum().backward()
            _step(eager, x)
    assert_close_grads(model, eager)
    assert fxslots.counters["captures"] > 0


@pytest.mark.cuda
def test_zero_size_and_non_contiguous_inputs_captured():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh()).cuda()
    eager = copy.deepcopy(model)
    c = torch.compile(model, backend="fxslots", options={"slots": 2})
    xs = ([torch.randn(8, 12, device="cuda").t() for _ in range(3)] +  # (12, 8), strided
          [torch.randn(0, 8, device="cuda") for _ in range(3)])
    for x in xs:
        _step(c, x)
        _step(eager, x)
    assert_close_grads(model, eager)


# ----------------------------------------------------------------------------- soak


@pytest.mark.cuda
def test_soak_cuda_memory_flat():
    """1,000 captured steps over three variants and three schedules: after warm-up no new
    captures, no new compiles, no growth of device memory or arenas."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh()).cuda()
    c = torch.compile(model, backend="fxslots", options={"slots": 3, "debug": True},
                      dynamic=False)
    xs = {n: torch.randn(n, 64, device="cuda") for n in (4, 8, 12)}
    schedules = (("F0", "B0"), ("F0", "F1", "B1", "F2", "B0", "B2"),
                 ("F0", "F1", "F2", "B2", "D0", "B1"))

    def step(i):
        live = {}
        for ev in schedules[i % 3]:
            mb = int(ev[1])
            if ev[0] == "F":
                live[mb] = c(xs[(4, 8, 12)[(i + mb) % 3]])
            elif ev[0] == "B":
                live.pop(mb).sum().backward()
            else:
                del live[mb]

    for i in range(60):
        step(i)
    captures, compiles = fxslots.counters["captures"], fxslots.counters["compiles"]
    arenas, allocated = arena_state(), settled_allocated()
    for i in range(60, 1060):
        step(i)
    assert fxslots.counters["captures"] == captures
    assert fxslots.counters["compiles"] == compiles
    assert arena_state() == arenas
    assert settled_allocated() == allocated
    assert pending() == 0


@pytest.mark.cuda
def test_an_output_viewing_a_parameter_keeps_no_forward_alive():
    """The CPU test ``test_an_output_viewing_a_parameter_is_a_new_tensor_at_each_replay`` on
    real CUDA graphs: each replay hands a new tensor over the parameter's bytes, a forward
    dropped without its backward gives its slot back, and the gradients are eager's."""
    import weakref

    from tests.test_graph_executor_cpu import _SharesItsWeight

    fxslots.reset()
    torch.manual_seed(0)
    model = _SharesItsWeight().cuda()
    eager = copy.deepcopy(model)
    c, before = torch.compile(model, backend="fxslots", options={"slots": 1}), None
    for step in range(6):
        x = torch.randn(4, 8, device="cuda")
        y, w = c(x)
        assert before is None or before() is not w
        if step != 3:  # dropped without its backward
            (y.sum() + (w * w).sum()).backward()
            ey, ew = eager(x)
            (ey.sum() + (ew * ew).sum()).backward()
        before = weakref.ref(w)
        del y, w
    assert fxslots.counters["captures"] > 0
    assert_close_grads(model, eager)
