"""Never crash a user's training: checkpointed random ops compile, and any failure inside the
passes becomes the documented fallback (a warning naming the graph, the node and the cause,
counted; raised only with strict=True), with gradients still right."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

import fxslots
from examples.models import MLP
from fxslots import backward
from fxslots.passes import rewrite
from tests.helpers import assert_same, compiled_twins, run, schedule_ffbb, train_twins


class CheckpointedDropout(nn.Module):
    """The issue's minimal case: dropout inside activation checkpointing."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return checkpoint(lambda y: F.dropout(self.lin(y), 0.1), x, use_reentrant=False)


class CheckpointedAttention(nn.Module):
    """rand_like and the CPU flash attention kernel are random ops too."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.qkv = nn.Linear(16, 48)

    def block(self, x):
        q, k, v = self.qkv(x).view(x.shape[0], x.shape[1], 3, 2, 8).unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2)).transpose(1, 2)
        return y.flatten(2) * torch.rand_like(x)

    def forward(self, x):
        return checkpoint(self.block, x, use_reentrant=False)


@pytest.mark.parametrize("model", [CheckpointedDropout, CheckpointedAttention])
@pytest.mark.parametrize("dynamic", [False, True])
def test_checkpointed_random_ops_compile_and_match_aot_eager(model, dynamic):
    m = model()
    d = 8 if model is CheckpointedDropout else 16
    inputs = [torch.randn(2, 4, d), torch.randn(2, 6, d)]
    sched = schedule_ffbb(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = run(m, "fxslots", inputs, sched, dynamic=dynamic, options={"slots": 2})
    assert not [w for w in caught if "fxslots" in str(w.message)]
    assert fxslots.counters["fallbacks"] == 0
    assert_same(ours, run(m, "aot_eager", inputs, sched, dynamic=dynamic), exact=True)


@pytest.mark.parametrize("kernels", ["aten", "inductor"])
def test_a_checkpointed_llama_with_its_loss_in_the_graph_compiles_with_slots(kernels):
    """Every block checkpointed, cross-entropy in the graph: its total weight, a 0-dim host
    output of an op with several, was tagged a host scalar to recompute, which min-cut cannot
    (it would recompute the loss op): the whole graph fell back. Now no fallback, and the loss
    and gradients are aot_eager's bitwise; under Inductor torch.compile default's, bitwise but
    for the embedding's, whose scatter-add Inductor runs in parallel on CPU in no fixed order
    (two runs of torch.compile's default differ by 4.7e-10 there)."""
    import dataclasses

    from examples.llama import SIZES, Llama, batch

    cfg = dataclasses.replace(SIZES["llama-tiny"], checkpoint=True)
    data = [batch(cfg, 2, s, generator=torch.Generator().manual_seed(s)) for s in (16, 32)]
    results = []
    for backend in ("fxslots", "aot_eager" if kernels == "aten" else "inductor"):
        fxslots.reset()
        torch.manual_seed(0)
        m = Llama(cfg)
        options = ({"options": {"strict": True, "kernels": kernels, "slots": 2}}
                   if backend == "fxslots" else {})
        f = torch.compile(m, backend=backend, **options)
        losses = [f(*d) for d in data]
        for loss in losses:
            loss.backward()
        results.append(([loss.detach() for loss in losses], [p.grad for p in m.parameters()]))
        if backend == "fxslots":
            assert fxslots.counters["fallbacks"] == 0 and fxslots.counters["compiles"] >= 1
    names = ["loss 0", "loss 1"] + [n for n, _ in Llama(cfg).named_parameters()]
    for name, a, b in zip(names, *(losses + grads for losses, grads in results), strict=True):
        if kernels == "inductor" and name == "embed.weight":
            torch.testing.assert_close(a, b, rtol=0, atol=1e-8)
        else:
            assert torch.equal(a, b), name


def test_the_saved_rng_state_passes_through_untouched():
    report = str(fxslots.explain(CheckpointedDropout(), torch.randn(4, 8), slots=1))
    assert "passed to backward untouched: getitem_2 (an RNG state)" in report
    assert "rng_state_output_0" in report  # the backward's own name for it


def _broken_write(*args, **kwargs):
    raise KeyError("injected failure")


def _falls_back_like_aot_eager(*expected: str, **options) -> None:
    """An MLP trains with one fallback warning holding each of ``expected``, bitwise as
    aot_eager."""
    m = MLP(16, 32, 2)
    inputs = [torch.randn(4, 16), torch.randn(4, 16)]
    with pytest.warns(UserWarning) as caught:
        ours = run(m, "fxslots", inputs, schedule_ffbb(2), options={"slots": 2, **options})
    (msg,) = {str(w.message) for w in caught if "fxslots" in str(w.message)}
    assert all(e in msg for e in expected), msg
    assert fxslots.counters["fallbacks"] == 1
    assert_same(ours, run(m, "aot_eager", inputs, schedule_ffbb(2)), exact=True)


class Modulus(nn.Module):
    """|y|^2 as y * y.conj(): autograd saves y and its lazy conjugate, a view of y's bytes."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.w = nn.Parameter(torch.randn(4, 4, dtype=torch.complex64) * 0.3)

    def forward(self, x):
        y = (x @ self.w).repeat(1, 2)
        return torch.view_as_real(y * y.conj()).sum(-1)


@pytest.mark.parametrize("options", [{}, {"copy_free": False}, {"offload": "all"}],
                         ids=["default", "copied", "offloaded"])
def test_a_saved_lazy_conjugate_falls_back(options):
    """A slot view carries dtype, offset, shape and stride, not the conjugate bit: the
    backward read y where it saved conj(y) (gradients off by up to 25, no warning). Such a
    graph now runs without slots, with a warning naming the node, bitwise as eager."""
    m = Modulus()
    ref = copy.deepcopy(m)
    c = torch.compile(m, backend="fxslots", options=options)
    x = torch.randn(2, 4, dtype=torch.complex64)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    with pytest.warns(UserWarning, match="lazy conjugate view is saved for backward"):
        out = c(a)
    weights = torch.arange(out.numel()).view(out.shape)
    (out * weights).sum().backward()
    (ref(b) * weights).sum().backward()
    assert torch.equal(m.w.grad, ref.w.grad) and torch.equal(a.grad, b.grad)


def test_a_failing_pass_falls_back_with_a_warning_naming_graph_node_and_cause(monkeypatch):
    monkeypatch.setattr(rewrite, "_write_in_place", _broken_write)
    _falls_back_like_aot_eager(
        "runs without slots: graph 0/0 (region 0): rewrite_forward failed at node",
        "KeyError: 'injected failure'")


def test_strict_turns_a_failing_pass_into_an_error(monkeypatch):
    monkeypatch.setattr(rewrite, "_write_in_place", _broken_write)
    c = torch.compile(MLP(16, 32, 2), backend="fxslots", options={"strict": True})
    with pytest.raises(Exception, match="rewrite_forward failed at node") as info:
        c(torch.randn(4, 16))
    cause = info.value
    while cause is not None and not isinstance(cause, fxslots.UnsupportedGraphError):
        cause = cause.__cause__ or getattr(cause, "inner_exception", None)
    assert isinstance(cause, fxslots.UnsupportedGraphError)


@pytest.mark.parametrize("name", ["unalias_outputs", "schedule_reload"])
def test_a_failing_backward_pass_falls_back_while_the_forward_compiles(monkeypatch, name):
    """AOTAutograd compiles the backward at the first ``.backward()``, after the forward
    committed to its slots: the backward's passes run ahead, where a failure still falls back
    (before, this stopped training at the first backward)."""
    monkeypatch.setattr(backward, name, _broken_write)
    _falls_back_like_aot_eager(f"runs without slots: graph 0/0 (region 0): {name} failed",
                               "KeyError: 'injected failure'", offload="all")


def test_the_backward_compiled_is_the_one_rewritten_while_the_forward_compiled(monkeypatch):
    calls, real = [], backward.schedule_reload
    monkeypatch.setattr(backward, "schedule_reload",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    m = MLP(16, 32, 2)
    inputs = [torch.randn(4, 16), torch.randn(4, 16)]
    with warnings.catch_warnings(), fxslots.report.recording() as records:
        warnings.simplefilter("error")  # no fallback, no "runs again" warning
        ours = run(m, "fxslots", inputs, schedule_ffbb(2), options={"slots": 2, "offload": "all"})
    assert calls == [1]  # the forward's compile ran it; the backward's took its result
    (record,) = records
    assert "reload_wait" in record.backward, record.backward
    assert_same(ours, run(m, "aot_eager", inputs, schedule_ffbb(2)), exact=True)


def test_a_backward_unlike_the_partitioners_is_rewritten_again_with_a_warning(monkeypatch):
    calls, real = [], backward.schedule_reload
    monkeypatch.setattr(backward, "schedule_reload",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    seen = iter(range(1000))
    monkeypatch.setattr(backward, "signature", lambda graph: next(seen))  # never the same
    m = MLP(16, 32, 2)
    inputs = [torch.randn(4, 16), torch.randn(4, 16)]
    with pytest.warns(UserWarning, match="differs from the graph the partitioner returned"):
        ours = run(m, "fxslots", inputs, schedule_ffbb(2), options={"slots": 2, "offload": "all"})
    assert calls == [1, 1]
    assert fxslots.counters["fallbacks"] == 0
    assert_same(ours, run(m, "aot_eager", inputs, schedule_ffbb(2)), exact=True)


def _failing_decompositions(options):
    """A decomposition table whose GELU raises while AOTAutograd traces with it (as Inductor's
    max_pool2d decomposition did when torch._inductor.lowering was not yet imported)."""
    def broken(*args, **kwargs):
        raise AttributeError("injected tracing failure")
    return {torch.ops.aten.gelu.default: broken}


def test_a_failure_while_tracing_falls_back_and_trains_as_aot_eager(monkeypatch):
    from fxslots import kernels

    monkeypatch.setattr(kernels, "decompositions", _failing_decompositions)
    _falls_back_like_aot_eager("runs without slots: graph 0/0: tracing it failed",
                               "injected tracing failure")
    monkeypatch.undo()
    strict = torch.compile(MLP(16, 32, 2), backend="fxslots", options={"strict": True})
    monkeypatch.setattr(kernels, "decompositions", _failing_decompositions)
    with pytest.raises(Exception, match="tracing it failed"):
        strict(torch.randn(4, 16))


def _data_dependent_decompositions(options):
    """GELU's decomposition meets a data-dependent ``.item()``, as Mixtral's routing does while
    AOTAutograd traces it on CUDA (H200 run 22)."""
    def data_dependent(*args, **kwargs):
        raise torch._subclasses.fake_tensor.DataDependentOutputException(
            torch.ops.aten._local_scalar_dense.default)
    return {torch.ops.aten.gelu.default: data_dependent}


@pytest.mark.parametrize("strict", [False, True])
def test_a_data_dependent_op_is_dynamos_graph_break_not_a_fallback(monkeypatch, strict):
    """Dynamo turns a backend's data-dependent exception into a graph break and runs that code
    eagerly, under any backend: fxslots lets it through untouched (no "runs without slots"
    warning, no fallback counted, no error with strict=True) and trains as aot_eager does."""
    from fxslots import kernels

    monkeypatch.setattr(kernels, "decompositions", _data_dependent_decompositions)
    m = MLP(16, 32, 2)
    inputs = [torch.randn(4, 16), torch.randn(4, 16)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = run(m, "fxslots", inputs, schedule_ffbb(2), options={"slots": 2,
                                                                   "strict": strict})
    assert not [w for w in caught if "fxslots" in str(w.message)]
    assert fxslots.counters["fallbacks"] == 0
    assert_same(ours, run(m, "eager", inputs, schedule_ffbb(2)), exact=True)


def test_kernels_inductor_traces_a_conv_net_with_max_pool():
    """Inductor's max_pool2d decomposition reads torch._inductor.lowering, which only
    torch.compile's own backend used to import: a conv net with kernels="inductor" failed
    to compile in a fresh process. (Run in one, since any Inductor compile imports it.)"""
    import subprocess
    import sys

    code = ("import torch, fxslots\n"
            "m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), "
            "torch.nn.MaxPool2d(2))\n"
            "c = torch.compile(m, backend='fxslots', options={'kernels': 'inductor', "
            "'strict': True})\n"
            "x = torch.randn(2, 3, 8, 8)\n"
            "c(x).sum().backward()\n"
            "assert fxslots.counters['inductor_fallbacks'] == 0, fxslots.counters\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_warning_shows_the_line_of_an_error_that_says_what_went_wrong():
    from fxslots.errors import gist

    # Inductor's subprocess errors open with a line that only introduces the traceback.
    sub = RuntimeError("An exception occurred in a subprocess:\n\nTraceback (most recent call "
                       "last):\n  File 'x.py'\nNameError('in_ptr1 is not defined')\n")
    assert gist(sub) == ("An exception occurred in a subprocess: ... "
                         "NameError('in_ptr1 is not defined')")
    assert gist(ValueError("bad value\nmore detail")) == "bad value"
    assert gist(ValueError("")) == ""


class _CountsPositives(nn.Module):
    """A count from ``bincount`` (of data-dependent length u0) scales the output: one element
    of the u0-long count is saved."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)

    def forward(self, x):
        h = self.a(x)
        count = torch.bincount((h[..., 1] > 0).long().flatten(), minlength=2).float()
        return h * count[1]


@torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True)
def test_a_saved_element_of_a_data_dependent_tensor_keeps_the_slots():
    """Found by a review: weighing whether to keep the u0-long count whole in the slot or copy
    its one saved element evaluated u0, which has no range among the saved set's symbols: a
    KeyError, and the graph ran without slots naming it. Now u0 counts as unbounded, the
    element is copied, and training is bitwise aot_eager's with no fallback."""
    train_twins(compiled_twins(_CountsPositives, {"strict": True}),
                [torch.randn(2, n, 8) for n in (5, 7, 5)], lambda y: y.square().mean())
    assert fxslots.counters["fallbacks"] == 0
