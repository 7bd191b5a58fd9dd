"""Shared test helpers: run a schedule of forwards and backwards under a backend."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn

import fxslots


class Net(nn.Module):
    """Linear + tanh twice: saved activations in every layer, a (B, 8) -> (B, 8) map."""

    def __init__(self, d: int = 8):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(d, d)
        self.b = nn.Linear(d, d)

    def forward(self, x):
        return torch.tanh(self.b(torch.tanh(self.a(x))))


def release_before(version: str, major: int, minor: int) -> bool:
    """Whether a release string (``"2.11.0+cu130"``, ``"3.6.0"``) is older than ``major.minor``."""
    return tuple(int(v) for v in version.split(".")[:2]) < (major, minor)


def torch_before(major: int, minor: int) -> bool:
    """Whether the installed torch is older than ``major.minor`` (the suite runs on 2.11-2.14)."""
    return release_before(torch.__version__, major, minor)


def skip_stages_sharing_a_rank(n_stages: int) -> None:
    """Skip a pipeline with several stages on this one rank where torch cannot run it: 2.11's
    pipelining sends between them through gloo, which cannot pair a rank with itself (the
    eager pipeline fails the same way)."""
    if n_stages > 1 and torch_before(2, 12):
        pytest.skip(f"torch {torch.__version__} cannot run two stages on one gloo rank")


def schedule_fbfb(n):
    return [op for i in range(n) for op in (("F", i), ("B", i))]


def schedule_ffbb(n):
    return [("F", i) for i in range(n)] + [("B", i) for i in range(n)]


def schedule_reverse(n):
    return [("F", i) for i in range(n)] + [("B", i) for i in reversed(range(n))]


def schedule_1f1b(n, k):
    """k forwards warm up, then one backward per forward, then the drain."""
    ops, f, b = [], 0, 0
    while f < min(k, n):
        ops.append(("F", f)); f += 1
    while f < n:
        ops.append(("B", b)); b += 1
        ops.append(("F", f)); f += 1
    while b < n:
        ops.append(("B", b)); b += 1
    return ops


def play(f, xs, schedule):
    """Run ``schedule`` (("F", i) / ("B", i) pairs) on ``f`` over the inputs ``xs``."""
    pending = {}
    for op, i in schedule:
        if op == "F":
            pending[i] = f(xs[i])
        else:
            loss_of(pending.pop(i)).backward()


def loss_of(out):
    return out.float().square().mean() if out.is_floating_point() else out.sum()


def run(model, backend, inputs, schedule, *, set_to_none=True, steps=1, dynamic=None,
        options=None):
    """Train a deep copy of ``model`` for ``steps`` steps of ``schedule`` over ``inputs``.

    Returns (per-step grads, outputs of the last step). With set_to_none=False gradients
    accumulate across steps in persistent .grad buffers.
    """
    fxslots.reset()
    torch.manual_seed(0)
    m = copy.deepcopy(model)
    if backend == "eager":
        f = m
    else:
        kw = {"options": options} if options else {}
        f = torch.compile(m, backend=backend, dynamic=dynamic, **kw)
    grads, outs = [], {}
    for _ in range(steps):
        pending = {}
        for op, i in schedule:
            if op == "F":
                pending[i] = f(inputs[i].clone())
                outs[i] = pending[i].detach().clone()
            else:
                loss_of(pending.pop(i)).backward()
        grads.append([None if p.grad is None else p.grad.clone() for p in m.parameters()])
        m.zero_grad(set_to_none=set_to_none)
    return grads, outs


def assert_same(a, b, exact=True, atol=1e-5, rtol=1e-5):
    (ga, oa), (gb, ob) = a, b
    assert oa.keys() == ob.keys()
    for k in oa:
        _check(oa[k], ob[k], exact, atol, rtol, f"output {k}")
    for step, (sa, sb) in enumerate(zip(ga, gb, strict=True)):
        for j, (x, y) in enumerate(zip(sa, sb, strict=True)):
            assert (x is None) == (y is None), f"step {step} grad {j}: one is None"
            if x is not None:
                _check(x, y, exact, atol, rtol, f"step {step} grad {j}")


def _check(x, y, exact, atol, rtol, what):
    if exact:
        assert torch.equal(x, y), f"{what} differs: max {(x - y).abs().max().item()}"
    else:
        torch.testing.assert_close(x, y, atol=atol, rtol=rtol, msg=lambda m: f"{what}: {m}")


def with_caps(monkeypatch, **fields):
    """Compiles from here on plan with the device figures ``caps_for`` gives, but ``fields``."""
    from dataclasses import replace

    from fxslots import backend, costs

    monkeypatch.setattr(backend, "caps_for", lambda device, link=None, **kw: replace(
        costs.caps_for(device, link, **kw), **fields))


def compiled_twins(make, options=None, dynamic=None):
    """``(ours, ref, f, g)``: a model from ``make()`` and a copy of it, compiled by fxslots
    (with ``options``) and by aot_eager."""
    torch.manual_seed(0)
    ours, ref = make(), make()
    ref.load_state_dict(ours.state_dict())
    return (ours, ref, torch.compile(ours, backend="fxslots", options=options, dynamic=dynamic),
            torch.compile(ref, backend="aot_eager", dynamic=dynamic))


def train_twins(twins, inputs, loss=lambda y: y.sum()) -> None:
    """Train ``compiled_twins``' pair a step per input: outputs, then every parameter's
    accumulated ``.grad``, bitwise equal."""
    ours, ref, f, g = twins
    for x in inputs:
        a, b = f(x), g(x)
        assert torch.equal(a, b)
        loss(a).backward()
        loss(b).backward()
    for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)


def train_cuda_head_bitwise(make, rows: int | tuple[int, ...], width: int, vocab: int,
                            steps: int = 4, dynamic: bool | None = None) -> Any:
    """A loss head ``make()`` compiled with fxslots (slots=1; ``dynamic`` as torch.compile
    takes it) on CUDA, from a fresh fxslots state and an emptied cache, trained beside an
    eager copy on bfloat16 rows (a tuple: one count per step, in turn): every step's
    gradients bitwise equal to eager's. Returns the compiled model: while the caller holds it,
    its CUDA graphs and their pool live (a pool dies with its last graph)."""
    fxslots.reset()
    torch.cuda.empty_cache()
    torch.manual_seed(0)
    m = make().cuda()
    e = copy.deepcopy(m)
    c = torch.compile(m, backend="fxslots", dynamic=dynamic, options={"slots": 1})
    counts = rows if isinstance(rows, tuple) else (rows,)
    for step in range(steps):
        n = counts[step % len(counts)]
        x = torch.randn(n, width, device="cuda", dtype=torch.bfloat16)
        t = torch.randint(0, vocab, (n,), device="cuda")
        c(x, t).backward()
        e(x, t).backward()
        for p, q in zip(m.parameters(), e.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0, msg=f"step {step}")
        m.zero_grad(set_to_none=True)
        e.zero_grad(set_to_none=True)
    return c


def train_under_compiled_autograd(f, model, ref, xs, where: str, same) -> None:
    """A step per input for ``f`` (``model`` compiled) and the eager ``ref``, with compiled
    autograd on around each whole step (``where="step"``: torchtitan's train context) or only
    around ``loss.backward()`` (``"backward"``); ``same(ours, eager, step)`` checks each .grad."""
    import contextlib

    from torch._dynamo import compiled_autograd

    def enabled(here):
        return (compiled_autograd._enable(torch.compile(backend="eager")) if here == where
                else contextlib.nullcontext())
    for step, x in enumerate(xs):
        with enabled("step"):
            loss = f(x).square().sum()
            with enabled("backward"):
                loss.backward()
        ref(x).square().sum().backward()
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            same(p.grad, q.grad, step)


def graph_pool_segments() -> list[int]:
    """The bytes of each segment the caching allocator holds in a CUDA graph pool."""
    return [s["total_size"] for s in torch.cuda.memory_snapshot()
            if tuple(s["segment_pool_id"]) != (0, 0)]


def report_part(text: str, start: str) -> str:
    """The part of an explain() report from the line ``start`` begins up to the graph pool's
    section, which has its own test (``tests/test_pool_room.py``), or to the end."""
    end = text.find("----- CUDA graph pool")
    return text[text.index(start):end if end >= 0 else None].rstrip()
