"""Random loops over a slot's output buffers (``staging.OutputBanks``), bitwise against
aot_eager (from the review of session 20, which wrote it to look for a wrong gradient).

Forwards write their outputs into their slot's buffers; backwards stage their tangents in the
buffer the caller does not hold, or in the region's staging buffer; gradients may go into the
arena. Here forwards and backwards interleave at random (up to ``slots`` in flight, backwards
oldest first or newest first), each output is held through its backward or let go, some
outputs and gradients are kept for good, ``.grad`` accumulates or is dropped, with or without
``prepare`` (either loop). Every step checks each output and every gradient against aot_eager,
and that nothing held or kept was written over. CPU stand-in graphs replay into the addresses
of their capture, as CUDA graphs do.
"""

from __future__ import annotations

import copy
import random

import pytest
import torch
from torch import nn

import fxslots
from examples.models import MLP
from tests.test_deliver_forward import _PassThrough, every_output  # noqa: F401
from tests.test_graph_executor_cpu import stand_in_graphs  # noqa: F401

SHAPES = (8, 4)


class _Two(nn.Module):
    """Two outputs, one of them close to a pass-through of the input."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x, z):
        h = torch.tanh(self.a(x))
        return self.b(h) + z.sin(), h * 2 + x


MODELS = {"pass": lambda: _PassThrough(16), "mlp": lambda: MLP(16, 32, 3), "two": _Two}


def _outputs(f, name: str, x, z) -> list[torch.Tensor]:
    out = f(x) if name == "mlp" else f(x, z)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _examples(name: str) -> list[tuple]:
    return [(torch.randn(s, 16, requires_grad=True),) if name == "mlp" else
            (torch.randn(s, 16, requires_grad=True), torch.randn(s, 16)) for s in SHAPES]


class _Loop:
    """The compiled model and its aot_eager twin, stepped together."""

    def __init__(self, name: str, slots: int, rng: random.Random):
        torch.manual_seed(0)
        self.m = MODELS[name]()
        self.e = copy.deepcopy(self.m)
        self.c = torch.compile(self.m, backend="fxslots", options={"slots": slots},
                               dynamic=False)
        self.r = torch.compile(self.e, backend="aot_eager", dynamic=False)
        self.name, self.slots, self.rng = name, slots, rng
        self.pending: list[tuple] = []  # microbatches in flight
        self.kept: list[list[tuple]] = []  # (tensor, its value then), kept for good
        self.last = None  # an output held through its backward, then a little longer

    def forward(self, step: int) -> None:
        s = self.rng.choice(SHAPES)
        x, z = torch.randn(s, 16), torch.randn(s, 16)
        xo, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
        ours, ref = _outputs(self.c, self.name, xo, z), _outputs(self.r, self.name, xr, z)
        assert all(torch.equal(a, b) for a, b in zip(ours, ref, strict=True)), step
        weights = [torch.randn_like(a) for a in ours]
        self.pending.append((ours, ref, weights, xo, xr))
        if self.rng.random() < 0.2:
            self.kept.append([(a, a.detach().clone()) for a in ours])

    def backward(self, step: int) -> None:
        rng = self.rng
        ours, ref, weights, xo, xr = self.pending.pop(0 if rng.random() < 0.7 else -1)
        hold = rng.random() < 0.6
        loss = sum((a * w).sum() for a, w in zip(ours, weights, strict=True))
        want = sum((a * w).sum() for a, w in zip(ref, weights, strict=True))
        then = [a.detach().clone() for a in ours]
        if not hold:
            del ours
        loss.backward()
        want.backward()
        if hold:
            assert all(torch.equal(a, b) for a, b in zip(ours, then, strict=True)), step
            self.last = (ours, then)
        assert torch.equal(xo.grad, xr.grad), step
        if rng.random() < 0.3:
            self.kept.append([(xo.grad, xo.grad.clone())])
        for a, b in zip(self.m.parameters(), self.e.parameters(), strict=True):
            assert (a.grad is None) == (b.grad is None), step
            assert a.grad is None or torch.equal(a.grad, b.grad), step
        if not self.pending and rng.random() < 0.6:
            if rng.random() < 0.2:
                self.kept.append([(p.grad, p.grad.clone()) for p in self.m.parameters()])
            for mod in (self.m, self.e):
                mod.zero_grad(set_to_none=True)

    def check_kept(self, step: int) -> None:
        if self.last is not None and self.rng.random() < 0.5:
            assert all(torch.equal(a, b) for a, b in zip(*self.last, strict=True)), step
            self.last = None
        assert all(torch.equal(a, b) for k in self.kept for a, b in k), step


@pytest.mark.parametrize("prepared", [None, False, True], ids=["plain", "prepare", "hold"])
@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("slots", [1, 2])
@pytest.mark.parametrize("seed", range(3))
def test_random_loops_over_output_buffers_match_aot_eager_bitwise(
        stand_in_graphs, every_output, seed, slots, name, prepared):  # noqa: F811
    loop = _Loop(name, slots, random.Random(seed))
    if prepared is not None:
        fxslots.prepare(loop.c, _examples(name), hold_outputs=prepared)
    for step in range(40):
        if len(loop.pending) < slots and (not loop.pending or loop.rng.random() < 0.6):
            loop.forward(step)
        else:
            loop.backward(step)
        loop.check_kept(step)
