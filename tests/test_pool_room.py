"""The shared CUDA graph pool's room (``SharedPool.make_room``, ``room.room_for``): one
segment as large as the most any capture of a model's variants holds at once, made inside its
first capture, so that the forward's blocks and then the backward's are cut from it instead of
each size taking a segment of its own (on CUDA: ``tests/test_cuda.py``, where one loss head's
captures use the room alone).
"""

from __future__ import annotations

from types import SimpleNamespace

import sympy
import torch
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

import fxslots
from fxslots import _torch
from fxslots.passes.lifetimes import allocated_peak
from fxslots.runtime.cudagraphs import room
from fxslots.runtime.variant import BORROWS, Direction
from tests.test_graph_executor_cpu import _StandInCapturer, stand_in_graphs  # noqa: F401

MiB = 2**20


class _Variant:
    """What ``room_for`` reads of a variant: the graph each backward runs (plain, delivering
    gradients into a buffer, computing temporaries in the slot's arena too), whether the loop
    drops its gradients, and the forward that writes its outputs into the slot's buffer."""

    def __init__(self, forward, backward, delivering=None, borrowing=None, dropped=True,
                 outputs_delivered=None, pool_room=True):
        self.graphs = (forward, backward, delivering, borrowing, outputs_delivered)
        self.deliver = None if delivering is None else SimpleNamespace(
            overlay=None if borrowing is None else SimpleNamespace(graph=borrowing))
        self.region = SimpleNamespace(grads_in_arena=lambda: dropped)
        self.deliver_forward = None if outputs_delivered is None else SimpleNamespace()
        self.name = "v0"
        self.ring = SimpleNamespace(options=fxslots.Options(pool_room=pool_room))
        self.layouts = {}  # the shapes it has run at: none (sized at its graphs' hints)

    def runner(self, direction, deliver=False):
        if direction is Direction.FORWARD:
            return self.graphs[4 if deliver else 0]
        return self.graphs[3 if deliver == BORROWS else 2 if deliver else 1]


def _f(x):
    a = x * 2
    c = (a + 1).view(-1)
    return c.sum()


_SLACK = _torch.cublas_workspace_bytes() + 2 * MiB


def test_the_room_is_the_most_bytes_a_graph_holds_at_once_and_a_workspace():
    """Nodes at shape hints: ``a`` lives until ``a + 1`` is made beside it, a view allocates
    nothing, the sum's 4 bytes come after ``a`` died; the larger graph sets the room, and the
    backward a warm loop captures stands for the backward."""
    small, large = make_fx(_f)(torch.zeros(32, 32)), make_fx(_f)(torch.zeros(64, 64))
    assert room.room_for([_Variant(small, small)]) == 2 * 32 * 32 * 4 + _SLACK
    assert room.room_for([_Variant(small, large)]) == 2 * 64 * 64 * 4 + _SLACK
    assert room.room_for([_Variant(small, large, small)]) == 2 * 32 * 32 * 4 + _SLACK
    assert room.room_for([_Variant(small, large, large, small)]) == 2 * 32 * 32 * 4 + _SLACK
    kept = _Variant(small, small, large, small, dropped=False)  # no gradients in the arena
    assert room.room_for([kept]) == 2 * 64 * 64 * 4 + _SLACK
    # a forward that writes its large outputs into the slot's output buffer holds none
    assert room.room_for([_Variant(large, small, outputs_delivered=small)]) == (
        2 * 32 * 32 * 4 + _SLACK)


def test_one_room_for_all_of_a_models_variants_and_none_for_compiled_code():
    """The largest of the variants known at the first capture sets the room, so that later
    captures of the others are cut from it too. Inductor's code allocates what it fuses, not
    what its nodes would: it is not counted, and a model of nothing else makes no room."""
    small, large = make_fx(_f)(torch.zeros(32, 32)), make_fx(_f)(torch.zeros(64, 64))
    assert room.room_for([_Variant(small, small), _Variant(large, large)]) == (
        2 * 64 * 64 * 4 + _SLACK)
    compiled = lambda *a: None  # noqa: E731
    assert room.room_for([_Variant(small, compiled)]) == 2 * 32 * 32 * 4 + _SLACK
    assert room.room_for([_Variant(compiled, compiled), _Variant(compiled, None)]) == 0
    assert room.room_for([]) == 0
    assert room.room_for([_Variant(large, large, pool_room=False)]) == 0  # the option's off


def test_each_capture_asks_for_the_room_of_the_graphs_a_warm_loop_runs(stand_in_graphs):
    """The executor passes ``room_for`` of all the model's variants (two batch sizes, the
    smaller compiled first); an MLP whose loop drops its gradients captures a backward that
    delivers them out of the pool, so the room is below the plain backward's, which holds
    them all."""
    _StandInCapturer.rooms = []
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 512), nn.GELU(), nn.Linear(512, 64))
    c = torch.compile(m, backend="fxslots", options={"slots": 1}, dynamic=False)
    for step in range(6):
        c(torch.randn(128 * (1 + step % 2), 64)).square().mean().backward()
        m.zero_grad(set_to_none=True)
    (region,) = fxslots.regions()
    small, large = region.live_variants()
    rooms = _StandInCapturer.rooms
    assert len(rooms) == 4 and set(rooms) == {room.room_for([large])}
    assert room.room_for([small]) < room.room_for([large])
    assert room.room_for([large]) < allocated_peak(large.backward_graph)[0] + _SLACK


def test_a_dynamic_variants_room_is_sized_at_the_largest_shape_it_has_run_at(
        stand_in_graphs):
    """``dynamic=True``: one variant of symbolic batch, compiled at 128 rows. Its graphs'
    shape hints say 128; by the time it captures the loop has run it at 512 too, and the room
    is sized there, where its backward holds four times the bytes."""
    _StandInCapturer.rooms = []
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 512), nn.GELU(), nn.Linear(512, 64))
    c = torch.compile(m, backend="fxslots", options={"slots": 1}, dynamic=True)
    for step in range(6):
        c(torch.randn((128, 512)[step % 2], 64)).square().mean().backward()
        m.zero_grad(set_to_none=True)
    (region,) = fxslots.regions()
    (variant,) = region.live_variants()
    (sym,) = variant.plan.capacity.free_symbols
    graph = room._backward_captured(variant)
    at_largest = allocated_peak(graph, {sym.name: 512})[0]
    assert allocated_peak(graph)[0] < at_largest  # the hints' shape, 128 rows
    assert room.room_for([variant]) == at_largest + _SLACK
    assert _StandInCapturer.rooms and set(_StandInCapturer.rooms) <= {at_largest + _SLACK}
    assert f"backward at {sym.name}=512 holds" in room.describe_room([variant])


def test_a_graph_that_cannot_be_sized_makes_no_room():
    """The room is memory saved, never a failed step: sizing that raises gives 0."""
    class Unsized:
        deliver, deliver_forward = None, None

        def runner(self, direction, deliver=False):
            raise RuntimeError("no hint for an unbacked size")

    assert room.room_for([Unsized()]) == 0


def test_explain_shows_the_room_and_the_graph_that_sized_it(stand_in_graphs):
    """Under CUDA graphs (stood in for on CPU) the report ends with the room and the graph
    whose nodes set it; without them there is no pool and no such section."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 512), nn.GELU(), nn.Linear(512, 64))
    report = fxslots.explain(m, torch.randn(256, 64))
    text = str(report)
    pool_part = text[text.index("----- CUDA graph pool -----"):].splitlines()
    (region,) = {id(g.variant.region): g.variant.region for g in report.graphs}.values()
    want = room.room_for(region.live_variants())
    assert pool_part[1].startswith(f"room: {want / 2**20:.1f} MiB, one segment made inside"), (
        pool_part)
    assert "v0's backward holds" in pool_part[1] or "v0's forward holds" in pool_part[1]


def test_explain_shows_no_pool_without_cuda_graphs():
    m = nn.Sequential(nn.Linear(8, 8))
    assert "CUDA graph pool" not in str(fxslots.explain(m, torch.randn(4, 8)))


def test_pool_room_false_asks_for_no_room(stand_in_graphs):
    """``options={"pool_room": False}``: every capture gets a room of 0 (its blocks are cut as
    they come), and explain() has no pool section."""
    _StandInCapturer.rooms = []
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 512), nn.GELU(), nn.Linear(512, 64))
    c = torch.compile(m, backend="fxslots", options={"slots": 1, "pool_room": False})
    for _ in range(3):
        c(torch.randn(256, 64)).square().mean().backward()
        m.zero_grad(set_to_none=True)
    assert _StandInCapturer.rooms == [0, 0]
    text = str(fxslots.explain(m, torch.randn(256, 64), pool_room=False))
    assert "CUDA graph pool" not in text


def test_a_size_the_layout_does_not_bind_is_taken_at_its_hint():
    """A graph with a size of a symbol the layout does not bind (a data-dependent one, say)
    is sized at its shape hints, as before, rather than losing the whole room; one it binds
    is sized there."""
    gm = make_fx(_f, tracing_mode="symbolic")(torch.zeros(32, 32))  # one symbol, both sizes
    (sym,) = {s for n in gm.graph.find_nodes(op="placeholder") for x in n.meta["val"].shape
              for s in sympy.sympify(_torch.sym_expr(x)).free_symbols}
    assert room._peak(gm, {"u0": 64}) == allocated_peak(gm)[0] == 2 * 32 * 32 * 4
    assert room._peak(gm, {sym.name: 64}) == 2 * 64 * 64 * 4
