"""Which graphs may become CUDA graphs (fxslots/capturable.py), on hand-built FX graphs whose
values are fake CUDA tensors: no GPU needed. A graph that reads or computes host tensors would
replay what its capture saw, so it runs uncaptured (the backend warns; tests/test_zoo.py covers
the RNG-state case end to end)."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode

from fxslots.capturable import uncapturable_reason
from fxslots.schemas import RNG_STATE, SavedSet

CUDA = torch.device("cuda:0")


def _graph(inputs: dict[str, torch.Tensor], body) -> fx.GraphModule:
    """A graph of ``inputs`` (placeholders) and ``body(graph, nodes) -> output``, each node's
    meta["val"] computed on the fake values."""
    g = fx.Graph()
    nodes = {}
    for name, val in inputs.items():
        nodes[name] = g.placeholder(name)
        nodes[name].meta["val"] = val
    out = body(g, nodes)
    g.output(out)
    gm = fx.GraphModule(torch.nn.Module(), g)
    for n in gm.graph.nodes:
        if n.op == "call_function":
            args = [a.meta["val"] if isinstance(a, fx.Node) else a for a in n.args]
            n.meta["val"] = n.target(*args, **n.kwargs)
    return gm


@pytest.fixture
def fake():
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        yield mode


def _mul(g, nodes, a, b):
    return g.call_function(torch.ops.aten.mul.Tensor, (nodes[a], nodes[b]))


def test_a_graph_all_on_the_device_is_capturable(fake):
    gm = _graph({"x": torch.empty(4, 8, device=CUDA), "w": torch.empty(4, 8, device=CUDA)},
                lambda g, n: _mul(g, n, "x", "w"))
    assert uncapturable_reason(None, gm, CUDA) is None


def test_a_cpu_op_is_not(fake):
    gm = _graph({"x": torch.empty(4, 8, device=CUDA), "c": torch.empty(3)},
                lambda g, n: (_mul(g, n, "x", "x"),
                              g.call_function(torch.ops.aten.sin.default, (n["c"],))))
    why = uncapturable_reason(None, gm, CUDA, static_input_indices=[])
    assert why is not None and "node c" in why and "cpu tensor of shape (3,)" in why, why


def test_a_cpu_scalar_input_is_staged_but_a_static_one_is_not(fake):
    def body(g, n):
        return _mul(g, n, "x", "s")

    inputs = {"x": torch.empty(4, 8, device=CUDA), "s": torch.empty(())}
    assert uncapturable_reason(None, _graph(inputs, body), CUDA) is None
    # static (a buffer): the capture would keep reading the value it saw
    why = uncapturable_reason(None, _graph(inputs, body), CUDA, static_input_indices=[1])
    assert why is not None and "node s" in why, why


def test_another_cuda_device_is_not(fake):
    gm = _graph({"x": torch.empty(4, device=CUDA), "y": torch.empty(4, device="cuda:1")},
                lambda g, n: _mul(g, n, "x", "x"))
    why = uncapturable_reason(None, gm, CUDA)
    assert why is not None and "cuda:1" in why, why


def test_a_saved_rng_state_is_not(fake):
    gm = _graph({"x": torch.empty(4, device=CUDA)}, lambda g, n: _mul(g, n, "x", "x"))
    saved = SavedSet((), (), passthrough=(("getitem_2", RNG_STATE), ("sym", "not a tensor")))
    why = uncapturable_reason(saved, gm, CUDA)
    assert why is not None and why.startswith("getitem_2 is the RNG state"), why
    assert uncapturable_reason(SavedSet((), (), passthrough=(("sym", "not a tensor"),)),
                               gm, CUDA) is None


def test_getitem_of_a_device_op_is_fine(fake):
    def body(g, n):
        pair = g.call_function(torch.ops.aten.var_mean.correction, (n["x"], [1]))
        return g.call_function(operator.getitem, (pair, 0))

    gm = _graph({"x": torch.empty(4, 8, device=CUDA)}, body)
    assert uncapturable_reason(None, gm, CUDA) is None


def _where_scalar(g, n, scalar_of):
    """``torch.where(x > 0, x, s)`` as decompositions trace it: a 0-dim CPU ``s`` from
    ``scalar_of(g, n)``, a CUDA kernel reading it as an argument."""
    s = scalar_of(g, n)
    pos = g.call_function(torch.ops.aten.gt.Scalar, (n["x"], 0))
    return g.call_function(torch.ops.aten.where.self, (pos, n["x"], s))


def test_a_host_scalar_made_of_literals_is_fine(fake):
    def literal(g, n):
        s = g.call_function(torch.ops.aten.scalar_tensor.default, (0.5,),
                            {"dtype": torch.float32, "device": torch.device("cpu")})
        return g.call_function(torch.ops.aten.mul.Tensor, (s, 2.0))

    gm = _graph({"x": torch.empty(4, device=CUDA)}, lambda g, n: _where_scalar(g, n, literal))
    assert uncapturable_reason(None, gm, CUDA) is None


def test_a_host_scalar_read_from_a_static_host_tensor_is_not(fake):
    def read(g, n):
        return g.call_function(torch.ops.aten.mul.Tensor, (n["b"], 2.0))

    gm = _graph({"x": torch.empty(4, device=CUDA), "b": torch.empty(())},
                lambda g, n: _where_scalar(g, n, read))
    why = uncapturable_reason(None, gm, CUDA, static_input_indices=[1])
    assert why is not None and "node b" in why, why
