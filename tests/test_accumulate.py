"""Gradient accumulation inside the backward graph (issue 12): with persistent ``.grad``
buffers the backward adds into them itself, one multi-tensor add at its end (a backward that
raises part-way adds nothing, as aot_eager's), and autograd has nothing left to do; anything autograd must see (hooks, create_graph, a buffer of another layout) takes the
plain backward. Bitwise against eager, under the eager executor and the CUDA-graph executor's
CPU stand-in."""

from __future__ import annotations

import copy
import dataclasses
import gc

import pytest
import torch

import fxslots
from examples.models import MLP
from tests.test_graph_executor_cpu import _StandInGraph, stand_in_graphs  # noqa: F401


def _variant():
    (region,) = fxslots.regions()
    (v,) = region.live_variants()
    return v


def _count_accumulating_runs(v) -> list[int]:
    calls = [0]
    graph = v.accumulate.graph

    def counted(*args):
        calls[0] += 1
        return graph(*args)

    v.accumulate = dataclasses.replace(v.accumulate, graph=counted)
    return calls


def _train(steps, *, set_to_none, slots=2, hook=False, options=None, replace_grads=False):
    torch.manual_seed(0)
    m = MLP()
    e = copy.deepcopy(m)
    c = torch.compile(m, backend="fxslots", options={"slots": slots, **(options or {})})
    if hook:
        for p in (*m.parameters(), *e.parameters()):
            p.register_hook(lambda g: g * 2)
    xs = [torch.randn(4, 16) for _ in range(3)]
    for _ in range(steps):
        outs = [c(x) for x in xs[:slots]]  # microbatches in flight
        for o in outs:
            o.sum().backward()
        for x in xs[:slots]:
            e(x).sum().backward()
        for x in xs[slots:]:
            c(x).sum().backward()
            e(x).sum().backward()
        for a, b in zip(m.parameters(), e.parameters(), strict=True):
            assert torch.equal(a.grad, b.grad)
        if replace_grads:  # an optimizer that reallocates: the same values, new buffers
            for p in m.parameters():
                p.grad = p.grad.clone()
        else:
            m.zero_grad(set_to_none=set_to_none)
            e.zero_grad(set_to_none=set_to_none)
    return m, c


@pytest.mark.parametrize("set_to_none", [False, True])
def test_accumulation_in_the_graph_is_bitwise_eager(set_to_none):
    m, c = _train(1, set_to_none=set_to_none)
    calls = _count_accumulating_runs(_variant())
    grads = [p.grad for p in m.parameters()]
    c(torch.randn(4, 16)).sum().backward()
    if set_to_none:
        assert calls[0] == 0  # no .grad buffer yet: the plain backward returned them
        c(torch.randn(4, 16)).sum().backward()
    assert calls[0] == 1
    if not set_to_none:  # added into the very buffers the user holds
        assert all(p.grad is g for p, g in zip(m.parameters(), grads, strict=True))


def test_hooks_take_the_plain_backward():
    m, c = _train(2, set_to_none=False, hook=True)  # bitwise eager, hooks applied
    calls = _count_accumulating_runs(_variant())
    c(torch.randn(4, 16)).sum().backward()
    assert calls[0] == 0  # the hook must see every gradient: autograd accumulates
    for p in m.parameters():
        p._backward_hooks.clear()
    c(torch.randn(4, 16)).sum().backward()
    assert calls[0] == 1


def test_autograd_option_turns_it_off():
    _train(2, set_to_none=False, options={"grad_accumulation": "autograd"})
    assert _variant().accumulate is None


@pytest.mark.parametrize("set_to_none", [False, True])
def test_under_graph_replays(stand_in_graphs, set_to_none):  # noqa: F811
    m, c = _train(4, set_to_none=set_to_none)
    assert fxslots.counters["captures"] > 0 and _StandInGraph.replays > 0
    captures = fxslots.counters["captures"]
    addresses = set()
    for _ in range(3):
        for x in [torch.randn(4, 16) for _ in range(3)]:
            c(x).sum().backward()
        addresses.add(tuple(p.grad.data_ptr() for p in m.parameters()))
        if set_to_none:
            m.zero_grad(set_to_none=True)
    assert fxslots.counters["captures"] == captures, "a loop at steady state captures nothing"
    # The .grad buffers autograd adopts come back at the same addresses every step.
    assert len(addresses) == 1


def test_replaced_buffers_are_never_written_stale(stand_in_graphs):  # noqa: F811
    """A buffer the user (or an optimizer) replaced moves the graph's input: the captured
    backward that added into the old one must not replay."""
    _train(4, set_to_none=False, replace_grads=True)


def test_accumulation_with_inductor_kernels_is_bitwise_torch_compile():
    torch.manual_seed(0)
    ref = MLP()
    m = copy.deepcopy(ref)
    c = torch.compile(m, backend="fxslots", options={"slots": 2, "kernels": "inductor"})
    r = torch.compile(ref)
    xs = [torch.randn(4, 16) for _ in range(3)]
    for _ in range(2):
        for x in xs:
            c(x).sum().backward()
            r(x).sum().backward()
    assert _variant().accumulate.kernel is not None
    for a, b in zip(m.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)


class _TiedAcrossABreak(torch.nn.Module):
    """One weight used by two compiled regions (a tied embedding across a graph break)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, 16))
        self.b = torch.nn.Parameter(torch.randn(16))

    def forward(self, x):
        h = torch.tanh(x @ self.w + self.b)
        torch._dynamo.graph_break()
        return torch.tanh(h @ self.w.t())


def test_a_parameter_two_regions_feed_is_accumulated_by_autograd():
    """Autograd sums the two regions' contributions to ``w`` and adds the sum to ``.grad`` once;
    two in-graph adds would round differently (found by FXSLOTS_ZOO_FULL=1 on a tied
    embedding). Bitwise eager's over accumulating steps."""
    torch.manual_seed(0)
    m = _TiedAcrossABreak()
    e = copy.deepcopy(m)
    c = torch.compile(m, backend="fxslots", options={"slots": 2})
    for step in range(3):
        for i in range(3):
            x = torch.randn(8, 16, generator=torch.Generator().manual_seed(10 * step + i))
            c(x).square().sum().backward()
            e(x).square().sum().backward()
        for a, b in zip(m.parameters(), e.parameters(), strict=True):
            assert torch.equal(a.grad, b.grad), (step, (a.grad - b.grad).abs().max())
    assert len(fxslots.regions()) == 2
    assert fxslots.state.accumulators_shared >= 1
    noted = [k for k in fxslots.state.accumulators if k in {id(p) for p in m.parameters()}]
    assert noted
    del c, m, a, b
    gc.collect()
    assert not set(noted) & set(fxslots.state.accumulators), "dead parameters kept their entries"
