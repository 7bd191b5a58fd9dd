"""Threads sharing one compiled model: a slot goes to one microbatch at a time.

``SlotRing.acquire`` chooses a free slot and then takes it; ``release`` gives it back. Both hold
the ring's lock. Each test below widens the window between choosing and taking with a 0.5 ms
sleep, so that without the lock two threads would choose the same slot (the issue's repro: the
second backward then found "their slot was reused, which should be impossible").
"""

from __future__ import annotations

import threading
import time

import pytest
import torch

import fxslots
from fxslots.options import Options
from fxslots.runtime.ring import SlotRing
from tests.helpers import Net

THREADS = 4
STEPS = 8


@pytest.fixture
def slow_acquire(monkeypatch):
    """0.5 ms between choosing a free slot and marking it taken."""
    real = SlotRing._free_slot

    def chosen_then_wait(self, *args):
        slot = real(self, *args)
        time.sleep(0.0005)
        return slot

    monkeypatch.setattr(SlotRing, "_free_slot", chosen_then_wait)


def _in_threads(work) -> None:
    """Run ``work(i)`` in THREADS threads started together; re-raise the first failure."""
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def body(i: int) -> None:
        try:
            start.wait()
            work(i)
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise errors[0]


def test_the_ring_never_hands_one_slot_to_two_threads(slow_acquire):
    ring = SlotRing("threads", Options(slots=THREADS))
    cpu = torch.device("cpu")
    holders: dict[int, int] = {}  # slot index -> thread holding it
    guard = threading.Lock()

    def work(i: int) -> None:
        for _ in range(STEPS):
            slot, alias, _ = ring.acquire(64, cpu, f"t{i}")
            with guard:
                assert slot.index not in holders, (
                    f"thread {i} took slot {slot.index}, held by thread {holders[slot.index]}")
                holders[slot.index] = i
            time.sleep(0.0002)
            still_ours = slot.owns(torch.empty(0, dtype=torch.uint8).set_(alias))
            assert still_ours, f"thread {i}: another thread replaced slot {slot.index}'s owner"
            with guard:
                del holders[slot.index]
            ring.release(slot)
            del alias

    _in_threads(work)
    assert ring.pending() == 0


def _inputs(i: int, step: int) -> torch.Tensor:
    return torch.randn(4, 8, generator=torch.Generator().manual_seed(1000 * i + step))


def test_threads_sharing_a_compiled_model_train_like_aot_eager(slow_acquire):
    """THREADS threads, each running forward then backward STEPS times on one compiled model
    with as many slots as threads: every output and input gradient is aot_eager's, bitwise."""
    model, ref = Net(), Net()
    c = torch.compile(model, backend="fxslots", options={"slots": THREADS, "debug": True})
    c_ref = torch.compile(ref, backend="aot_eager")

    def step(fn, x):
        x = x.clone().requires_grad_()
        out = fn(x)
        gx, = torch.autograd.grad(out.sum(), x)
        return out.detach(), gx

    want = {(i, s): step(c_ref, _inputs(i, s)) for i in range(THREADS) for s in range(STEPS)}
    step(c, _inputs(0, 0))  # compile forward and backward before the threads start
    got: dict[tuple[int, int], tuple] = {}

    def work(i: int) -> None:
        for s in range(STEPS):
            got[i, s] = step(c, _inputs(i, s))

    _in_threads(work)
    for key, (out, gx) in want.items():
        assert torch.equal(got[key][0], out), f"output of thread {key[0]} step {key[1]}"
        assert torch.equal(got[key][1], gx), f"input gradient of thread {key[0]} step {key[1]}"
    slots = [s for g in fxslots.regions() for s in g.ring.slots]
    assert slots and not any(s.pending() for s in slots)


_paused, _resume = threading.Event(), threading.Event()


@torch.library.custom_op("fxslots_tests::pause_in_backward", mutates_args=())
def _pause(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@_pause.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("fxslots_tests::pause_here", mutates_args=())
def _pause_here(g: torch.Tensor) -> torch.Tensor:
    if threading.current_thread().name == "paused":
        _paused.set()
        assert _resume.wait(60), "never resumed"
    return g.clone()


@_pause_here.register_fake
def _(g):
    return torch.empty_like(g)


_pause.register_autograd(lambda ctx, g: _pause_here(g))


class _Pausing(Net):
    def forward(self, x):  # a backward in the thread named "paused" waits in its middle
        return torch.tanh(self.b(_pause(torch.tanh(self.a(x)))))


def test_a_slot_in_its_backward_is_never_taken_by_another_thread():
    """Thread A is inside a compiled backward (AOTAutograd has let the forward's saved
    tensors go: the slot looked orphaned) when a forward of another model of the class runs
    in the main thread. That forward took A's slot, A's backward then gave it back, and the
    next forward wrote over the main thread's saved activations (found by a review: an
    internal error, or wrong gradients with none). The slot stays A's; both train as
    aot_eager's."""
    def grads_of(backend):
        fxslots.reset()
        _paused.clear(), _resume.clear()
        models = [_Pausing(), _Pausing()]
        f, g = (torch.compile(m, backend=backend, **(
            {"options": {"slots": 1}} if backend == "fxslots" else {})) for m in models)
        for fn in (f, g):  # compiled, warm
            fn(_inputs(0, 0)).sum().backward()
        a = threading.Thread(target=lambda: [f(_inputs(1, s)).square().sum().backward()
                                             for s in range(2)], name="paused")
        a.start()
        assert _paused.wait(60), "thread A never reached its backward"
        out = g(_inputs(2, 0))
        _resume.set()
        a.join(timeout=60)
        out.square().sum().backward()
        g(_inputs(2, 1)).square().sum().backward()
        return [p.grad.clone() for m in models for p in m.parameters()]

    want = grads_of("aot_eager")
    got = grads_of("fxslots")
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert sum(r.ring.orphans for r in fxslots.regions()) == 0
