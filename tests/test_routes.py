"""Routes: which kernel writes an op's result into given memory, and the expansions that replay
an op as the ops it is made of. Each expansion must be bitwise the op it replaces."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.fx as fx

from fxslots.passes.expand import expand
from fxslots.routes import COPY, EXPANSIONS, find_route

aten = torch.ops.aten


@pytest.mark.parametrize("op,args,want", [
    (aten.gelu.default, (), "aten::gelu.out"),  # a cpu kernel of its own
    (aten.clone.default, (), None),  # a copy op: copy_ when the source is on the device
    (aten._native_batch_norm_legit_functional.default, (), "aten::_native_batch_norm_legit.out"),
    (aten.max_pool2d_with_indices.default, (), "aten::max_pool2d_with_indices.out"),
    (aten.relu.default, (), "aten::clamp_min.out"),
    (aten.native_dropout.default, (None, 0.1, True), "aten::mul.out"),
    # Composite out= forms that fill out= themselves (TensorFactories.cpp), not a hidden copy.
    (aten.zeros.default, (), "aten::zeros.out"),
    (aten.ones.default, (), "aten::ones.out"),
    (aten.full.default, (), "aten::full.out"),
    (aten.constant_pad_nd.default, (None, [1, 0, 2, 3]), "aten::fill_.Scalar"),
])
def test_routes_with_a_kernel_that_writes_into_given_memory(op, args, want):
    route = find_route(op, "cpu", "cpu", args)
    assert route.op == (want or COPY) and route.why is None


@pytest.mark.parametrize("op,args,why", [
    # PyTorch generates these out= overloads: the functional op, then a copy into out=.
    (aten.native_layer_norm.default, (), "composite on cpu"),
    (aten.convolution.default, (), "composite on cpu"),
    (aten._scaled_dot_product_flash_attention_for_cpu.default, (), "no out= form"),
    (operator.getitem, (), "not an ATen operator"),
    (aten.native_dropout.default, (None, 0.1, False), "composite on cpu"),  # eval mode
    (aten.constant_pad_nd.default, (None, [1, -1]), "composite on cpu"),  # narrows the input
    (aten.zeros_like.default, (), "composite on cpu"),  # generated: zeros_like, then a copy
])
def test_routes_that_would_be_a_hidden_copy_are_refused_with_a_remedy(op, args, why):
    route = find_route(op, "cpu", None, args)
    assert route.op is None and why in route.why and route.remedy


def test_dropout_expands_on_cpu_only():
    # CUDA runs a fused kernel: there the sequence would not be the op.
    assert find_route(aten.native_dropout.default, "cuda", None, (None, 0.1, True)).op is None


class _Val:
    """An argument node as _expands sees it: its example value in meta."""

    def __init__(self, v):
        self.meta = {"val": v}


def _conv_args(x=(2, 3, 8, 8), w=(4, 3, 3, 3), transposed=False, groups=1, dtype=None):
    dtype = dtype or torch.float32
    return (_Val(torch.empty(x, dtype=dtype)), _Val(torch.empty(w, dtype=dtype)), None,
            [1, 1], [1, 1], [1, 1], transposed, [0, 0], groups)


def test_a_cuda_convolution_routes_through_cudnn_into_the_slot(monkeypatch):
    """On CUDA, aten.convolution of a 2-d single-group convolution runs cuDNN, then adds the
    bias: fxslots::cudnn_convolution.out does the same into out=. On CPU no kernel writes a
    convolution into given memory (above), and a build without cuDNN copies. Run on the H200:
    tests/test_cuda.py."""
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: False)
    assert find_route(aten.convolution.default, "cuda", None, _conv_args()).op is None
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    route = find_route(aten.convolution.default, "cuda", None, _conv_args())
    assert route.op == "fxslots::cudnn_convolution.out" and "cudnn_convolution" in route.via
    for args in (_conv_args(transposed=True), _conv_args(groups=3, w=(3, 1, 3, 3)),
                 _conv_args(x=(2, 3, 8), w=(4, 3, 3)), _conv_args(dtype=torch.float64)):
        assert find_route(aten.convolution.default, "cuda", None, args).op is None
    assert find_route(aten.convolution.default, "cpu", None, _conv_args()).op is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", ["relu", "mul", "add", "sub", "div", "safe_softmax", "embedding",
                                  "dropout", "sort", "index_put", "pad", "pad_last",
                                  "masked_fill", "masked_fill_tensor"])
def test_expansions_are_bitwise_the_op_and_write_into_the_slot(case, dtype):
    x = torch.randn(3, 5, 33).to(dtype)
    x[0, 1] = float("-inf")  # a fully masked softmax row
    op, args, n_out = {
        "relu": (aten.relu.default, (x,), 1),
        "mul": (aten.mul.Scalar, (x, 1.7), 1),
        "add": (aten.add.Scalar, (x, 1.7, 3), 1),
        "sub": (aten.sub.Scalar, (x, 0.3), 1),
        "div": (aten.div.Scalar, (x, 1.7), 1),
        "safe_softmax": (aten._safe_softmax.default, (x, -1), 1),
        "embedding": (aten.embedding.default,
                      (torch.randn(40, 8).to(dtype), torch.randint(0, 40, (3, 7))), 1),
        "dropout": (aten.native_dropout.default, (x.nan_to_num(0.0), 0.2, True), 2),
        "sort": (aten.sort.default, (x.round(decimals=1), -1, True), 2),
        "index_put": (aten.index_put.default, (x, [torch.tensor([1, 2, 2])],
                                               torch.randn(3, 5, 33).to(dtype), True), 1),
        "masked_fill": (aten.masked_fill.Scalar, (x[:1], torch.rand(3, 5, 33) > 0.5, -2.5), 1),
        "masked_fill_tensor": (aten.masked_fill.Tensor, (x.transpose(0, 2), torch.rand(5, 1) > 0.5,
                                                         torch.tensor(7.0).to(dtype)), 1),
        "pad": (aten.constant_pad_nd.default, (x, [1, 2, 0, 3, 2, 0], -1.5), 1),
        "pad_last": (aten.constant_pad_nd.default, (x[:, 1:].transpose(1, 2), [0, 4]), 1),
    }[case]
    assert op in EXPANSIONS
    torch.manual_seed(0)
    want = op(*args)
    want = want if isinstance(want, tuple) else (want,)
    torch.manual_seed(0)
    got, dests = _run_expanded(op, args, n_out)
    for w, g, d in zip(want, got, dests, strict=True):
        assert torch.equal(w, g), case
        assert g.data_ptr() == d.data_ptr() and torch.equal(g, d), "not written into the slot"


def _run_expanded(op, args, n_out):
    """``op(*args)`` as a one-node graph that ``expand`` rewrote, run from the current RNG
    state with fresh slot views: (its results, the slot views)."""
    state = torch.get_rng_state()
    g = fx.Graph()
    tensors = []

    def arg(a):  # a tensor (in a list too) becomes a graph input
        if isinstance(a, (list, tuple)):
            return [arg(x) for x in a]
        if isinstance(a, torch.Tensor):
            tensors.append(a)
            return g.placeholder(f"a{len(tensors)}")
        return a

    phs = [arg(a) for a in args]
    views = [g.placeholder(f"slot{k}") for k in range(n_out)]
    node = g.call_function(op, tuple(phs))
    with torch.random.fork_rng():
        ref = op(*args)  # for metadata only; the graph draws from ``state``
    ref = ref if isinstance(ref, tuple) else (ref,)
    node.meta["val"] = ref if n_out > 1 else ref[0]
    outs = ([g.call_function(operator.getitem, (node, k)) for k in range(n_out)] if n_out > 1
            else [node])
    g.output(tuple(outs))
    expand(g, node, dict(enumerate(views)))
    gm = fx.GraphModule({}, g)
    dests = [torch.empty_like(r) for r in ref]
    torch.set_rng_state(state)
    got = gm(*tensors, *dests)
    return got, dests


class _PadAndFill(torch.nn.Module):
    """A padded activation and a filled tensor that backward reads (mul saves both inputs)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = torch.nn.functional.pad(self.lin(x), (1, 2, 0, 1), value=0.5)
        floor = torch.maximum(torch.tanh(y), torch.zeros(y.shape, device=x.device))
        return (floor * y * torch.full(y.shape, 1.5, device=x.device)).sum(-1)


@pytest.mark.parametrize("kernels", ["aten", "inductor"])
def test_padded_and_filled_values_are_written_into_the_slot_bitwise(kernels):
    """F.pad's output and torch.full's land in their slots by the op's own fill and copy, and
    training matches eager bitwise; under Inductor the pad goes back to the op it was."""
    import fxslots
    from fxslots.geometry import evaluate
    from fxslots.report import recording

    x = torch.randn(4, 6, 8)
    ref = _PadAndFill()
    ref(x).square().mean().backward()
    model = _PadAndFill()
    fxslots.reset()
    with recording() as records:
        f = torch.compile(model, backend="fxslots",
                          options={"kernels": kernels, "strict": True, "recompute": "none"})
        f(x).square().mean().backward()
    for a, b in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad) if kernels == "aten" else torch.allclose(a.grad, b.grad)
    (rec,) = [r for r in records if r.plan is not None]
    assert rec.fallback is None
    assert "aten.fill_" in rec.forward_after and "aten.constant_pad_nd(" not in rec.forward_after
    if kernels == "aten":  # (min_cut, Inductor's partitioner, recomputes the factories)
        for op in ("zeros", "full"):
            assert f"aten.{op}.out(" in rec.forward_after, op
        assert evaluate(rec.plan.copy_free_bytes, {}) == evaluate(rec.plan.slot_bytes, {}) > 0


class _BatchNormOver(torch.nn.Module):
    """BatchNorm1d over a (B, T, C) input turned (B, C, T), or BatchNorm2d over channels_last."""

    def __init__(self, layout):
        super().__init__()
        self.layout = layout
        self.bn = torch.nn.BatchNorm1d(8) if layout == "transposed" else torch.nn.BatchNorm2d(8)

    def forward(self, x):
        if self.layout == "transposed":
            x = x.transpose(1, 2)
        return torch.tanh(self.bn(x))


@pytest.mark.parametrize("layout", ["transposed", "channels_last"])
def test_batch_norm_writes_into_the_slot_only_over_a_dense_input(layout):
    """CPU batch norm's out= kernel computes garbage statistics and outputs for an input not
    dense in a memory format, where the functional kernel is right (found by a review: a
    transposed input trained on wrong values with no error). Such a norm is copied;
    over a channels_last input it still writes its slot. Outputs, gradients and running
    statistics bitwise aot_eager's."""
    import fxslots
    from fxslots.report import recording
    from tests.helpers import compiled_twins

    shape = (2, 5, 8) if layout == "transposed" else (2, 8, 4, 4)
    fxslots.reset()
    ours, ref, f, g = compiled_twins(lambda: _BatchNormOver(layout), {"recompute": "none"})
    with recording() as records:
        for _ in range(2):
            x = torch.randn(shape)
            if layout == "channels_last":
                x = x.to(memory_format=torch.channels_last)
            a, b = f(x), g(x)
            assert torch.equal(a, b)
            a.square().mean().backward()
            b.square().mean().backward()
    for p, q in zip(ours.state_dict().values(), ref.state_dict().values(), strict=True):
        assert torch.equal(p, q)
    for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)
    (rec,) = [r for r in records if r.plan is not None]
    written = "_native_batch_norm_legit.out(" in rec.forward_after
    assert written == (layout == "channels_last")
    if layout == "transposed":
        assert any("out= kernel computes wrong values" in (g.root.why_not_out or "")
                   for g in rec.saved.groups if g.root is not None)
