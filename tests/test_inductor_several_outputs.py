"""An op that writes several slots (fxslots' attention forward: output, logsumexp, seed,
offset) under ``kernels="inductor"``: lowered to one ``fxslots::<op>_into`` call that writes
every out= argument and returns nothing, which Inductor calls as it is (returning them, the
op was one Inductor could not lower, H200 run 37f), and each value read where it was written.

fxslots' attention kernels run only on CUDA; on CPU a custom op over ``native_layer_norm.out``
(three out= arguments, ``out0``..``out2``, as the attention ops name theirs) stands in for the
compile, the run and the audit, and the cuDNN variant's graph for its returned sizes. Other
such ops Inductor takes as they are (ATen's in Mixtral's router: ``tests/test_zoo.py``)."""

from __future__ import annotations

import operator

import torch
import torch.fx as fx

import pytest

from fxslots._torch.inductor import inductor_compile, inductor_output_code
from fxslots.passes.audit import slot_writes
from fxslots.passes.lower import NotLowerable, lower_forward
from fxslots.schemas import SLOT_META, SlotView

aten = torch.ops.aten
# In fxslots' namespace: only fxslots' own ops are lowered so (passes/lower.py).
_LIB = torch.library.Library("fxslots", "FRAGMENT")
_LIB.define("test_norm.out(Tensor x, int[] shape, Tensor w, Tensor b, float eps, *, "
            "Tensor(a!) out0, Tensor(b!) out1, Tensor(c!) out2) -> (Tensor(a!), Tensor(b!), "
            "Tensor(c!))")
_LIB.impl("test_norm.out", lambda x, shape, w, b, eps, **outs: aten.native_layer_norm.out(
    x, shape, w, b, eps, **outs), "CompositeExplicitAutograd")
torch.library.register_fake("fxslots::test_norm.out", lambda *a, out0, out1, out2: (
    out0, out1, out2), lib=_LIB)
NORM = torch.ops.fxslots.test_norm.out


def _slot(g: fx.Graph, name: str, val: torch.Tensor) -> fx.Node:
    ph = g.placeholder(name)
    ph.meta["val"] = val
    ph.meta[SLOT_META] = SlotView(name, name, val.dtype, tuple(val.shape), tuple(val.stride()), 0)
    return ph


def _layer_norm_graph(scratch: tuple = (aten.empty_strided.default, ([4, 1], [1, 1])),
                      read: tuple[int, ...] = (0, 1)) -> fx.GraphModule:
    """The stand-in writing its output and mean into slots and its rstd into ``scratch``; the
    output's reader and outputs ``read`` are returned."""
    g = fx.Graph()
    x, w, b = g.placeholder("x"), g.placeholder("w"), g.placeholder("b")
    s_out = _slot(g, "slot_out", torch.empty(4, 8))
    s_mean = _slot(g, "slot_mean", torch.empty(4, 1))
    rstd = g.call_function(*scratch, {"dtype": torch.float32, "device": torch.device("cpu")})
    ln = g.call_function(NORM, (x, [8], w, b, 1e-5),
                         {"out0": s_out, "out1": s_mean, "out2": rstd})
    items = [g.call_function(operator.getitem, (ln, k)) for k in read]
    g.output((g.call_function(aten.mul.Tensor, (items[0], 2.0)), *items))
    return fx.GraphModule(torch.nn.Module(), g)


def test_an_op_writing_several_slots_is_one_call_inductor_compiles_and_the_audit_reads():
    gm = lower_forward(_layer_norm_graph(), lambda op: True, {})
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert [str(n.target) for n in calls] == [
        "aten.empty_strided.default", "fxslots.test_norm_out_into.default",
        "aten.mul.Tensor"], calls
    # the values are read where the call wrote them: the slots themselves
    assert [str(a) for a in next(iter(gm.graph.find_nodes(op="output"))).args[0]] == [
        "mul_tensor", "slot_out", "slot_mean"]
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 8), torch.randn(8), torch.randn(8)
    slots = [torch.full((4, 8), float("nan")), torch.full((4, 1), float("nan"))]
    compiled = inductor_compile(gm, [x, w, b, *slots], static_input_idxs=[])
    got = compiled([x, w, b, *slots])
    want, mean, _ = torch.native_layer_norm(x, [8], w, b, 1e-5)
    assert torch.equal(slots[0], want) and torch.equal(slots[1], mean)
    assert torch.equal(got[0], want * 2) and torch.equal(got[1], want)
    names = {"slot_out", "slot_mean"}
    writes = slot_writes(inductor_output_code(compiled), names | {"x", "w", "b"}, names)
    assert writes == {n: ["in place: fxslots.test_norm_out_into.default writes it"]
                      for n in names}, writes


def test_an_output_read_from_scratch_the_op_resizes_is_not_lowered():
    """Under dynamic shapes an output nobody saves gets an empty tensor the op resizes: read
    after the call, Inductor would read it at the size it saw (ATen's sort did that to
    Mixtral's router), so the forward runs its ATen graph instead."""
    gm = _layer_norm_graph(scratch=(aten.empty.memory_format, ([0],)), read=(0, 2))
    with pytest.raises(NotLowerable, match="which the op resizes"):
        lower_forward(gm, lambda op: True, {})


def test_a_size_the_op_returns_is_read_from_the_input_that_has_it():
    """cuDNN attention's variant returns the sequence lengths beside its out= tensors (the
    backward reads them): under dynamic shapes each becomes that size of query and key."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from fxslots.out_variants import out_variant
    from fxslots.routes import resolve

    op = resolve(out_variant("aten::_scaled_dot_product_cudnn_attention"))
    traced = make_fx(lambda q, k: q + 1 + k.sum(), tracing_mode="symbolic")(
        torch.empty(2, 4, 16, 8), torch.empty(2, 4, 24, 8))
    q_val, k_val = (p.meta["val"] for p in traced.graph.find_nodes(op="placeholder"))
    g = fx.Graph()
    q, k = g.placeholder("q"), g.placeholder("k")
    q.meta["val"], k.meta["val"] = q_val, k_val
    outs = {f"out{i}": _slot(g, f"slot{i}", torch.empty(2, 4, 16, 8)) for i in (0, 1, 6, 7)}
    call = g.call_function(op, (q, k, k, None, True, 0.0, True), outs)
    call.meta["val"] = (None,) * 4 + (q_val.shape[2], k_val.shape[2]) + (None,) * 3
    items = [g.call_function(operator.getitem, (call, i)) for i in (0, 4, 5, 7)]
    g.output(tuple(items))
    gm = lower_forward(fx.GraphModule(torch.nn.Module(), g), lambda op: True, {})
    returned = next(iter(gm.graph.find_nodes(op="output"))).args[0]
    assert [str(r) for r in (returned[0], returned[3])] == ["slot0", "slot7"]
    assert [(r.target, r.args[0].name, r.args[1]) for r in returned[1:3]] == [
        (aten.sym_size.int, "q", 2), (aten.sym_size.int, "k", 2)]
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"].count(
        torch.ops.fxslots.cudnn_attention_out_into.default) == 1
