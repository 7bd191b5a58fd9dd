"""A forward that writes its large outputs into its slot's output buffer itself
(``passes/deliver.fresh_outputs``, ``grads.deliver_forward``, ``banks.forward_buffer``).

Before, each replay computed them into the pool and copied them out for the caller: the pool
was sized by them (two thirds of heavy's, H200 run 30c) and every step paid the copy. CPU runs
use the stand-in graph of tests/test_graph_executor_cpu.py, which writes each replay's results
into the addresses of its capture, as a replay does.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.fx as fx
from torch import nn

import fxslots
from examples.models import MLP
from fxslots import _torch
from fxslots.passes import deliver
from fxslots.passes.deliver import deliver_outputs, fresh_outputs
from fxslots.runtime.cudagraphs import staging
from fxslots.runtime.cudagraphs.outputs import OutKind
from fxslots.runtime.layout import make_views, pack
from tests.helpers import assert_same, run, schedule_1f1b, schedule_ffbb
from tests.test_deliver import _record_kinds
from tests.test_graph_executor_cpu import _StandInGraph, stand_in_graphs  # noqa: F401

aten = torch.ops.aten


@pytest.fixture
def every_output(monkeypatch):
    """Every output is large enough to deliver (the tests' models are small)."""
    monkeypatch.setattr(deliver, "MIN_OUTPUT_BYTES", 1)


class _Outputs(nn.Module):
    """Returns a fresh value, one that is also saved, a view of its input and a small one."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):
        y = self.lin(x)
        h = y.sin()  # saves y: y lives in the slot
        return h @ self.lin.weight, y, x.view(-1), h.sum()


def _forward_graph() -> fx.GraphModule:
    got = {}

    def fw(gm, _):
        got["fw"] = gm
        return _torch.mark_boxed(lambda args: gm(*args))

    from functorch.compile import aot_module

    aot_module(_Outputs(), fw_compiler=fw, bw_compiler=fw)(torch.randn(4, 16, requires_grad=True))
    return got["fw"]


def test_only_fresh_large_outputs_are_delivered(every_output):
    fw = _forward_graph()
    # the matmul's result, and the sum: y is saved (returned twice: to the caller and to the
    # backward), the view is of an input
    assert fresh_outputs(fw, torch.device("cpu"), 4) == [0, 3]
    assert fresh_outputs(fw, torch.device("cpu"), 1) == [0]  # the first n only
    assert fresh_outputs(fw, torch.device("meta"), 4) == []


def test_small_outputs_stay_in_the_pool():
    assert fresh_outputs(_forward_graph(), torch.device("cpu"), 4) == []


def test_the_twin_computes_an_output_into_its_buffer_bitwise(every_output):
    fw = _forward_graph()
    outputs = fresh_outputs(fw, torch.device("cpu"), 4)
    gm, delivered = deliver_outputs(fw, outputs, None, "out", "output")
    # the matmul computes into its buffer; a full sum (no out= overload) is copied there
    assert [d.in_place for d in delivered] == [True, False]
    written = [str(n.target) for n in gm.graph.nodes if n.kwargs.get("out") is not None]
    copies = [n for n in gm.graph.nodes if n.target is aten.copy_.default]
    assert written == ["aten.mm.out"] and [c.args[0].name for c in copies] == ["out_3"]
    assert [p.name for p in gm.graph.find_nodes(op="placeholder")][-2:] == ["out_0", "out_3"]
    geometry, nbytes = pack([(d.dtype, d.shape, d.stride) for d in delivered], 64)
    buffer = torch.empty(nbytes, dtype=torch.uint8)
    views = make_views(buffer.untyped_storage(), torch.device("cpu"), geometry)
    args = [torch.randn(p.meta["val"].shape) for p in fw.graph.find_nodes(op="placeholder")]
    with torch.no_grad():
        want, got = fw(*args), gm(*args, *views)
    lo, hi = buffer.data_ptr(), buffer.data_ptr() + nbytes
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        assert torch.equal(w, g), f"output {i}"
        assert (lo <= g.data_ptr() < hi) == (i in outputs), f"output {i}"


def test_captured_forward_delivers_its_outputs_bitwise(stand_in_graphs,  # noqa: F811
                                                       every_output, monkeypatch):
    kinds = _record_kinds(monkeypatch, forward=True)
    torch.manual_seed(0)
    model, xs = MLP(16, 32, 3), [torch.randn(4, 16) for _ in range(4)]
    sched = schedule_ffbb(2) + [(op, i + 2) for op, i in schedule_1f1b(2, 2)]
    ours = run(model, "fxslots", xs, sched, steps=4, options={"slots": 2})
    assert _StandInGraph.replays > 0
    assert OutKind.BUFFER in kinds and OutKind.POOL not in kinds, kinds
    (region,) = fxslots.regions()
    assert sorted(region.forward_outputs) == [0, 1]  # buffers per slot
    assert all(b.held == 0 for b in region.forward_outputs.values())
    assert_same(ours, run(model, "aot_eager", xs, sched, steps=4))


def test_mixed_outputs_match_aot_eager_bitwise(stand_in_graphs, every_output,  # noqa: F811
                                               monkeypatch):
    """Outputs of every kind at once, two microbatches in flight: a fresh one (delivered), one
    also saved (in the slot, copied out), a view of the input, a scalar."""
    kinds = _record_kinds(monkeypatch, forward=True)
    torch.manual_seed(0)
    m = _Outputs()
    ref = copy.deepcopy(m)
    c = torch.compile(m, backend="fxslots", options={"slots": 2})
    e = torch.compile(ref, backend="aot_eager")
    for step in range(5):
        xs = [torch.randn(4, 16) for _ in range(2)]
        got = [c(x) for x in xs]  # both in flight
        want = [e(x) for x in xs]
        for g, w in zip(got, want, strict=True):
            assert all(torch.equal(a, b) for a, b in zip(g, w, strict=True)), step
        for outs in (*got, *want):
            sum(o.float().square().sum() for o in outs if o.requires_grad).backward()
        for p, q in zip(m.parameters(), ref.parameters(), strict=True):
            assert torch.equal(p.grad, q.grad), step
        m.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
    assert OutKind.BUFFER in kinds, kinds


def test_outputs_the_caller_keeps_are_never_overwritten(stand_in_graphs,  # noqa: F811
                                                        every_output, monkeypatch):
    """A loop that keeps every output: the slot's two buffers fill, then each forward finds
    both held and runs the plain graph (outputs copied out of the pool); after ``HELD_LIMIT``
    of those the slot stops delivering and its buffers go. What the caller kept stays what it
    was, and every step matches eager."""
    kinds = _record_kinds(monkeypatch, forward=True)
    torch.manual_seed(0)
    m, e = MLP(16, 32, 3), MLP(16, 32, 3)
    e.load_state_dict(m.state_dict())
    c = torch.compile(m, backend="fxslots", options={"slots": 1})
    kept, copies = [], []
    for _ in range(staging.HELD_LIMIT + 5):
        x = torch.randn(4, 16)
        out = c(x)
        want = e(x)
        assert torch.equal(out, want)
        out.sum().backward()
        kept.append(out)
        copies.append(out.detach().clone())
    for k, c_ in zip(kept, copies, strict=True):
        assert torch.equal(k, c_)
    (banks,) = fxslots.regions()[0].forward_outputs.values()
    assert banks.held > staging.HELD_LIMIT and all(b.tensor is None for b in banks.banks)
    assert OutKind.BUFFER in kinds and OutKind.POOL in kinds, kinds


def test_outputs_dropped_before_the_next_forward_keep_one_buffer(stand_in_graphs,  # noqa: F811
                                                                 every_output):
    torch.manual_seed(0)
    m = MLP(16, 32, 3)
    c = torch.compile(m, backend="fxslots", options={"slots": 1})
    addresses = set()
    for step in range(6):
        out = c(torch.randn(4, 16))
        if step >= 2:  # after the warm-up: in the slot's buffer
            addresses.add(out.data_ptr())
        out.sum().backward()
        del out
    (region,) = fxslots.regions()
    (banks,) = region.forward_outputs.values()
    first, second = banks.banks
    # out is held through its backward: the tangents go to the second buffer, in place of
    # the staging buffer (banks.tangent_buffer); the outputs stay in the first
    assert len(addresses) == 1 and banks.held == 0
    assert second.tensor is not None and region.staging.tensor is None
    lo = first.tensor.data_ptr()
    assert lo <= addresses.pop() < lo + first.tensor.numel()


def test_the_output_held_until_the_next_forward_returns_alternates_two_buffers(
        stand_in_graphs, every_output, monkeypatch):  # noqa: F811
    """``out = model(x); out.sum().backward()``: ``out`` still holds the last output while the
    next forward runs. Each forward after the warm-up writes into the buffer the caller holds
    nothing of, the two in turn (a capture each), never into the output it holds; every step
    matches eager."""
    kinds = _record_kinds(monkeypatch, forward=True)
    torch.manual_seed(0)
    m, e = MLP(16, 32, 3), MLP(16, 32, 3)
    e.load_state_dict(m.state_dict())
    c = torch.compile(m, backend="fxslots", options={"slots": 1})
    before = fxslots.counters["captures"]
    out = last = None
    addresses = []
    for step in range(8):
        x = torch.randn(4, 16)
        out = c(x)
        assert torch.equal(out, e(x)), step
        if last is not None:  # the output held through this forward is what it was
            assert torch.equal(last[0], last[1]), step
        if step >= 1:
            addresses.append(out.data_ptr())
        out.sum().backward()
        last = (out, out.detach().clone())
        m.zero_grad(set_to_none=True)
    (banks,) = fxslots.regions()[0].forward_outputs.values()
    spans = [(b.tensor.data_ptr(), b.tensor.data_ptr() + b.tensor.numel()) for b in banks.banks]
    where = [next(i for i, (lo, hi) in enumerate(spans) if lo <= a < hi) for a in addresses]
    assert where == [0, 1] * 3 + [0], where
    assert banks.held == 0 and OutKind.POOL not in kinds and OutKind.BUFFER in kinds, kinds
    # a forward per buffer; the backward at step 1 stages its tangents in the second buffer,
    # from step 2 on in the staging buffer: ``last`` holds both outputs through each backward
    assert fxslots.counters["captures"] - before == 4


def test_a_moved_gradient_buffer_leaves_the_forward_graphs(stand_in_graphs,  # noqa: F811
                                                           every_output, monkeypatch):
    """A loop that keeps its gradients moves the region's gradient buffer at each backward
    (until delivery stops there); the forward's graphs write another buffer and stay."""
    from fxslots.runtime.cudagraphs import executor

    directions = []
    capture = executor.GraphExecutor._capture

    def recording(self, variant, slot, key, *rest):
        directions.append(key.direction.value)
        return capture(self, variant, slot, key, *rest)

    monkeypatch.setattr(executor.GraphExecutor, "_capture", recording)
    torch.manual_seed(0)
    m = MLP(16, 32, 3)
    c = torch.compile(m, backend="fxslots", options={"slots": 1})
    kept = []
    for _ in range(staging.HELD_LIMIT + 3):
        c(torch.randn(4, 16)).sum().backward()
        kept.append([p.grad for p in m.parameters()])
        m.zero_grad(set_to_none=True)
    assert directions.count("forward") == 1, directions
    assert directions.count("backward") > 1, directions


def test_a_moved_buffer_leaves_no_stale_graph_in_any_shape(stand_in_graphs):  # noqa: F811
    """Two shapes (two variants, an executor each) write their gradients into the region's
    one gradient buffer. A loop that keeps its gradients makes each backward move it; the
    graphs of the old buffer are then dropped in both executors, not kept for good in the one
    that did not move it. Every gradient still matches eager bitwise."""
    torch.manual_seed(0)
    m, e = MLP(16, 32, 3), MLP(16, 32, 3)
    e.load_state_dict(m.state_dict())
    c = torch.compile(m, backend="fxslots", options={"slots": 1}, dynamic=False)
    shapes = (64, 4)
    fxslots.prepare(c, [torch.randn(rows, 16) for rows in shapes])
    kept = []
    for step in range(2 * staging.HELD_LIMIT):
        x = torch.randn(shapes[step % 2], 16)
        c(x).sum().backward()
        e(x).sum().backward()
        assert all(torch.equal(a.grad, b.grad) for a, b in
                   zip(m.parameters(), e.parameters(), strict=True)), step
        kept.append([p.grad for p in m.parameters()])  # held: the next backward moves it
        for mod in (m, e):
            mod.zero_grad(set_to_none=True)
    (region,) = fxslots.regions()
    assert len(region.live_variants()) == 2
    current = {b.generation for b in region.outputs.values()}
    delivers = {k.delivers for v in region.live_variants() for k in v.executor.graphs
                if k.direction.value == "backward"} - {-1}
    assert delivers <= current, (delivers, current)


def test_explain_shows_the_delivering_forward(stand_in_graphs, every_output):  # noqa: F811
    torch.manual_seed(0)
    text = str(fxslots.explain(MLP(16, 32, 2), torch.randn(4, 16)))
    assert "forward, delivering its outputs into its slot's output buffer" in text
    assert "addmm.out" in text and "out_0" in text


class _PassThrough(nn.Module):
    """``x``'s gradient is the tangent itself: the backward graph returns its tangent."""

    def __init__(self, width=16):
        super().__init__()
        self.lin = nn.Linear(16, width)

    def forward(self, x, z):
        return x + self.lin(z).sin()


def _captured_keys(monkeypatch) -> list:
    from fxslots.runtime.cudagraphs import executor

    keys, capture = [], executor.GraphExecutor._capture

    def recording(self, variant, slot, key, *rest):
        keys.append(key)
        return capture(self, variant, slot, key, *rest)

    monkeypatch.setattr(executor.GraphExecutor, "_capture", recording)
    return keys


def _step(model, x, z, w):
    (model(x, z) * w).sum().backward()  # the output is let go before its backward


def _twins(slots: int, width: int = 16, dynamic: bool | None = None):
    """A _PassThrough under fxslots and its copy under aot_eager: (module, compiled, twin's
    module, compiled twin)."""
    torch.manual_seed(0)
    m = _PassThrough(width)
    e = copy.deepcopy(m)
    return (m, torch.compile(m, backend="fxslots", options={"slots": slots}, dynamic=dynamic),
            e, torch.compile(e, backend="aot_eager", dynamic=dynamic))


def test_tangents_are_staged_in_the_output_buffer_the_caller_let_go(
        stand_in_graphs, monkeypatch):  # noqa: F811
    """A loop that turns each output (1 MiB: delivered; the input's gradient is not) into its
    loss at once: the backward stages its tangent in the slot's output buffer, the region's
    staging buffer is never allocated, and every gradient matches aot_eager bitwise, the
    input's too, which is the tangent itself: handed out as a copy (captured or not), it stays
    what it was while later forwards write that buffer."""
    keys = _captured_keys(monkeypatch)
    torch.manual_seed(0)
    m = _PassThrough(4096)
    e = copy.deepcopy(m)
    c = torch.compile(m, backend="fxslots", options={"slots": 1})
    ref = torch.compile(e, backend="aot_eager")
    kept = []
    for step in range(staging.HELD_LIMIT + 7):  # the gradients' buffer retires, then replays
        x, z, w = torch.randn(64, 4096), torch.randn(64, 16), torch.randn(64, 4096)
        got, want = (  # autograd.grad: the tensors the backward returned, not AccumulateGrad's
            torch.autograd.grad((f(x_, z) * w).sum(), [x_, *mod.parameters()])
            for f, mod, x_ in ((c, m, x.clone().requires_grad_()),
                               (ref, e, x.clone().requires_grad_())))
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True)), step
        assert torch.equal(got[0], w), step
        kept.append((got[0], w))
    assert all(torch.equal(g, w) for g, w in kept)
    (region,) = fxslots.regions()
    (banks,) = region.forward_outputs.values()
    assert region.staging.tensor is None and banks.banks[1].tensor is None
    backwards = [k for k in keys if k.direction.value == "backward"]
    # (one capture per step: the gradients kept move the gradients' buffer, up to HELD_LIMIT)
    assert {k.tangents_in for k in backwards} == {banks.banks[0].generation}, keys


def test_prepare_captures_the_graphs_of_a_loop_that_lets_its_outputs_go(
        stand_in_graphs, every_output):  # noqa: F811
    torch.manual_seed(0)
    m = _PassThrough()
    c = torch.compile(m, backend="fxslots", options={"slots": 1})
    args = (torch.randn(4, 16, requires_grad=True), torch.randn(4, 16))
    fxslots.prepare(c, [args])
    before = fxslots.counters["captures"]
    for _ in range(3):
        _step(c, *args, torch.randn(4, 16))
        m.zero_grad(set_to_none=True)
    assert fxslots.counters["captures"] == before
    assert fxslots.regions()[0].staging.tensor is None


@pytest.mark.parametrize("hold", [False, True], ids=["prepare", "prepare-hold-outputs"])
def test_a_loop_that_holds_its_output_stages_tangents_in_the_other_buffer(
        stand_in_graphs, every_output, caplog, hold):  # noqa: F811
    """``out = model(x); loss = f(out); loss.backward()``: ``out`` is held through its backward
    and the next forward. Each backward stages its tangents in the slot's buffer the caller
    does not hold, so the two buffers are all the loop costs (no staging buffer beside them);
    the held output is never written over, and every gradient matches aot_eager bitwise. After
    ``prepare`` that loop captures its second buffer's graphs in its first steps, with a
    warning naming ``hold_outputs=True``; with it, none."""
    m, c, e, ref = _twins(slots=1)
    example = (torch.randn(4, 16, requires_grad=True), torch.randn(4, 16))
    print(fxslots.prepare(c, [example], hold_outputs=hold))
    before = fxslots.counters["captures"]
    out = last = None
    for step in range(6):
        x, z, w = torch.randn(4, 16), torch.randn(4, 16), torch.randn(4, 16)
        xs = [x.clone().requires_grad_() for _ in range(2)]
        out, want = c(xs[0], z), ref(xs[1], z)
        if last is not None:  # the last output, held through this forward, then let go
            assert torch.equal(*last), step
        last = None
        (out * w).sum().backward()
        (want * w).sum().backward()
        assert torch.equal(out, want), step  # held through its backward
        assert torch.equal(xs[0].grad, xs[1].grad), step
        assert all(torch.equal(a.grad, b.grad) for a, b in
                   zip(m.parameters(), e.parameters(), strict=True)), step
        last = (out, out.detach().clone())  # as ``out`` holds it until it is rebound
        for mod in (m, e):
            mod.zero_grad(set_to_none=True)
    (region,) = fxslots.regions()
    assert region.staging.tensor is None
    assert all(b.tensor is not None for b in region.forward_outputs[0].banks)
    # without hold_outputs: the second buffer's forward and its backward, which returns the
    # gradients, then (the loop drops them) writes them into the arena
    assert fxslots.counters["captures"] - before == (0 if hold else 3)
    assert ("hold_outputs=True" in caplog.text) is not hold


@pytest.mark.parametrize("shapes", [(8, 4), (8, 4, 2)], ids=["two", "three"])
def test_prepare_hold_outputs_captures_both_buffers_of_every_shape(
        stand_in_graphs, every_output, shapes):  # noqa: F811
    """Whatever the number of shapes, ``prepare(hold_outputs=True)`` puts each shape's forward
    in both of the slot's output buffers and its backward's tangents in both: a held loop on
    any shape, started on either buffer, captures nothing and matches aot_eager bitwise.
    (Run over all shapes in one sequence, an even number of them kept each shape on one
    buffer: review of session 20.)"""
    m, c, e, ref = _twins(slots=1, dynamic=False)  # a variant per shape
    fxslots.prepare(c, [(torch.randn(r, 16, requires_grad=True), torch.randn(r, 16))
                        for r in shapes], hold_outputs=True)
    before = fxslots.counters["captures"]
    out = None
    for rows in shapes + shapes[::-1]:
        for _ in range(3):
            x, z, w = torch.randn(rows, 16), torch.randn(rows, 16), torch.randn(rows, 16)
            xs = [x.clone().requires_grad_() for _ in range(2)]
            out, want = c(xs[0], z), ref(xs[1], z)
            (out * w).sum().backward()
            (want * w).sum().backward()
            assert torch.equal(out, want) and torch.equal(xs[0].grad, xs[1].grad), rows
            assert all(torch.equal(a.grad, b.grad) for a, b in
                       zip(m.parameters(), e.parameters(), strict=True)), rows
            for mod in (m, e):
                mod.zero_grad(set_to_none=True)
    assert fxslots.counters["captures"] == before


@pytest.mark.parametrize("in_flight", [False, True], ids=["slots", "in-flight"])
def test_prepare_hold_outputs_with_two_slots_leaves_nothing_to_capture(
        stand_in_graphs, every_output, in_flight):  # noqa: F811
    """Two slots: a held output's tangents go to the region's staging buffer (a second output
    buffer per slot would cost more), which ``prepare(hold_outputs=True)`` allocates; then the
    loop, two microbatches in flight each held through its backward and past the next
    forwards, captures nothing, and matches aot_eager bitwise."""
    m, c, e, ref = _twins(slots=2, dynamic=False)
    fxslots.prepare(c, [(torch.randn(4, 16, requires_grad=True), torch.randn(4, 16))] * 2,
                    slots=2, in_flight=in_flight, hold_outputs=True)
    before = fxslots.counters["captures"]
    held = []
    for step in range(4):
        batches = [(torch.randn(4, 16), torch.randn(4, 16), torch.randn(4, 16))
                   for _ in range(2)]
        xs = [[x.clone().requires_grad_() for _ in range(2)] for x, _, _ in batches]
        outs = [(c(x[0], z), ref(x[1], z)) for x, (_, z, _) in zip(xs, batches, strict=True)]
        held = [o for o, _ in outs]  # the last step's outputs, held through these forwards
        for (o, want), (_, _, w) in zip(outs, batches, strict=True):
            (o * w).sum().backward()
            (want * w).sum().backward()
            assert torch.equal(o, want), step
        assert all(torch.equal(x[0].grad, x[1].grad) for x in xs), step
        assert all(torch.equal(a.grad, b.grad) for a, b in
                   zip(m.parameters(), e.parameters(), strict=True)), step
        for mod in (m, e):
            mod.zero_grad(set_to_none=True)
    assert fxslots.regions()[0].staging.tensor is not None and len(held) == 2
    assert fxslots.counters["captures"] == before


def test_a_backward_that_cannot_be_captured_stages_no_tangents(stand_in_graphs, every_output,
                                                               monkeypatch):  # noqa: F811
    """A backward that no CUDA graph may capture (a sync inside it, say) runs every call
    uncaptured, and so does its forward: its tangents stay where they are, and no output buffer
    or staging buffer is allocated only to hold them. Gradients match aot_eager bitwise."""
    from fxslots import backend

    capturable = backend.uncapturable_reason
    monkeypatch.setattr(backend, "uncapturable_reason", lambda saved, gm, *rest: (
        "a sync (test)" if saved is None else capturable(saved, gm, *rest)))
    m, c, e, ref = _twins(slots=2)
    for step in range(4):
        x, z, w = torch.randn(4, 16), torch.randn(4, 16), torch.randn(4, 16)
        got, want = (torch.autograd.grad((f(x_, z) * w).sum(), [x_, *mod.parameters()])
                     for f, mod, x_ in ((c, m, x.clone().requires_grad_()),
                                        (ref, e, x.clone().requires_grad_())))
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True)), step
    (region,) = fxslots.regions()
    assert region.staging.tensor is None
    assert all(b.tensor is None for banks in region.forward_outputs.values()
               for b in banks.banks)
    assert fxslots.counters["captures"] == 0


def test_a_backward_after_a_held_output_stays_in_the_staging_buffer(
        stand_in_graphs, every_output, monkeypatch):  # noqa: F811
    """The caller holds its output through the backward, in a ring of two slots: the staging
    buffer serves (a second output buffer per slot would cost more), and once it exists every
    backward stays there (one graph), even one whose output was let go."""
    keys = _captured_keys(monkeypatch)
    torch.manual_seed(0)
    m = _PassThrough()
    c = torch.compile(m, backend="fxslots", options={"slots": 2})
    for step in range(6):
        x = torch.randn(4, 16, requires_grad=True)
        if step < 3:
            out = c(x, torch.randn(4, 16))
            was = out.detach().clone()
            (out * 2).sum().backward()
            assert torch.equal(out, was), step  # no tangent was staged over it
            del out
        else:
            _step(c, x, torch.randn(4, 16), torch.randn(4, 16))
    assert fxslots.regions()[0].staging.tensor is not None
    assert {k.tangents_in for k in keys if k.direction.value == "backward"} == {-1}, keys


@pytest.mark.cuda
def test_cuda_forward_outputs_land_in_the_slot_buffer_and_survive_replays():
    """On real CUDA graphs: a large output is computed into the slot's buffer, not the pool,
    matches eager, and outputs the caller keeps are not overwritten by later replays."""
    torch.manual_seed(0)
    m = MLP(1024, 256, 2).cuda()  # a 1 MiB output at batch 256, f32
    e = MLP(1024, 256, 2).cuda()
    e.load_state_dict(m.state_dict())
    c = torch.compile(m, backend="fxslots", options={"slots": 1})
    for step in range(5):
        x = torch.randn(256, 1024, device="cuda")
        out = c(x)
        torch.testing.assert_close(out, e(x), rtol=1e-4, atol=1e-5)
        if step >= 2:
            (banks,) = fxslots.regions()[0].forward_outputs.values()
            buffer = banks.banks[0]
            lo = buffer.tensor.data_ptr()
            assert lo <= out.data_ptr() < lo + buffer.tensor.numel(), step
        out.float().square().mean().backward()
        del out
    assert fxslots.counters["captures"] > 0
    last, where = None, []  # out held until the next forward returns: the two buffers in turn
    for step in range(5):
        x = torch.randn(256, 1024, device="cuda")
        out = c(x)
        torch.testing.assert_close(out, e(x), rtol=1e-4, atol=1e-5)
        if last is not None:
            assert torch.equal(last[0], last[1]), step
        (banks,) = fxslots.regions()[0].forward_outputs.values()
        where.append([b.tensor is not None and b.tensor.data_ptr() <= out.data_ptr()
                      < b.tensor.data_ptr() + b.tensor.numel() for b in banks.banks].index(True))
        out.float().square().mean().backward()
        last = (out, out.detach().clone())
    assert where == [0, 1, 0, 1, 0], where
    del out, last
    kept, copies = [], []
    for _ in range(staging.HELD_LIMIT + 3):
        out = c(torch.randn(256, 1024, device="cuda"))
        out.sum().backward()
        kept.append(out)
        copies.append(out.detach().clone())
    torch.cuda.synchronize()
    for k, c_ in zip(kept, copies, strict=True):
        assert torch.equal(k, c_)


@pytest.mark.cuda
def test_cuda_a_loop_that_holds_its_output_stages_tangents_in_the_other_buffer():
    """On real CUDA graphs, after ``prepare(hold_outputs=True)``: ``out = model(x); loss =
    f(out); loss.backward()`` replays both output buffers' graphs with no capture, stages each
    backward's tangents in the buffer it does not hold (no staging buffer), never writes over
    the output it holds, and its gradients match eager's."""
    torch.manual_seed(0)
    m = _PassThrough(1024).cuda()  # a 1 MiB output at batch 256, f32
    e = copy.deepcopy(m)
    c = torch.compile(m, backend="fxslots", options={"slots": 1})
    example = (torch.randn(256, 1024, device="cuda", requires_grad=True),
               torch.randn(256, 16, device="cuda"))
    fxslots.prepare(c, [example], hold_outputs=True)
    before = fxslots.counters["captures"]
    out = last = None
    for step in range(6):
        x, z, w = (torch.randn(256, n, device="cuda") for n in (1024, 16, 1024))
        xs = [x.clone().requires_grad_() for _ in range(2)]
        out, want = c(xs[0], z), e(xs[1], z)
        if last is not None:
            assert torch.equal(*last), step
        last = None
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
        held = out.detach().clone()
        (out * w).sum().backward()
        (want * w).sum().backward()
        assert torch.equal(out, held), step
        assert torch.equal(xs[0].grad, w), step  # the tangent itself, handed out as a copy
        for a, b in zip(m.parameters(), e.parameters(), strict=True):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-4)
        last = (out, held)
        for mod in (m, e):
            mod.zero_grad(set_to_none=True)
    (region,) = fxslots.regions()
    assert region.staging.tensor is None
    assert fxslots.counters["captures"] == before


class _TwoLarge(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)

    def forward(self, x):
        logits = self.a(x)
        with torch.no_grad():
            score = logits.softmax(-1)
        return logits, score


def test_delivered_outputs_can_be_changed_in_place(stand_in_graphs, every_output):  # noqa: F811
    """Found by a review (session 51): outputs delivered into the slot's output buffer were
    handed out as views of it, so autograd refused ``logits[:, 0] = -1e4`` from the first
    replay on, and a ``no_grad`` change to one made a backward through the other raise. They
    are tensors of their own over the buffer now; all bitwise aot_eager's."""
    torch.manual_seed(0)
    ours, ref = _TwoLarge(), _TwoLarge()
    ref.load_state_dict(ours.state_dict())
    f = torch.compile(ours, backend="fxslots", options={"slots": 1})
    g = torch.compile(ref, backend="aot_eager")
    t = torch.zeros(8, dtype=torch.long)
    for step in range(4):  # warm-up, capture, replays
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(step))
        losses = []
        for fn in (f, g):
            logits, score = fn(x)
            logits[:, 0] = -1e4
            with torch.no_grad():
                score.mul_(100)
            losses.append((nn.functional.cross_entropy(logits, t), score))
        assert torch.equal(losses[0][1], losses[1][1])
        for loss, _ in losses:
            loss.backward()
    assert _StandInGraph.replays > 0
    for a, b in zip(ours.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)
