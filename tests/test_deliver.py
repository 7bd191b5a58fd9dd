"""Gradients written by the captured backward into the region's output buffer itself
(passes/deliver.py), instead of copied there after each replay: the pass on a hand-traced
backward, then the executor on CPU with the stand-in graph, bitwise against aot_eager and
Inductor, including a caller that keeps its gradients past the next backward."""

from __future__ import annotations

import pytest
import torch
import torch.fx as fx
from torch import nn

import fxslots
from examples.models import MLP, Attention
from fxslots import _torch
from fxslots.passes.deliver import deliver_outputs, deliverable
from fxslots.runtime.cudagraphs import executor, staging
from fxslots.runtime.cudagraphs.outputs import OutKind
from fxslots.runtime.layout import make_views, pack
from tests.helpers import assert_same, run, schedule_1f1b, schedule_ffbb
from tests.test_graph_executor_cpu import _StandInGraph, stand_in_graphs  # noqa: F401

aten = torch.ops.aten


def _backward_graph() -> tuple[fx.GraphModule, list]:
    """The backward graph AOTAutograd makes for Linear, GELU, LayerNorm, Linear."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4))
    return _traced_backward(m, torch.randn(5, 8), None, lambda y: y.sum())


def _traced_backward(m: nn.Module, x: torch.Tensor, decompositions, loss
                     ) -> tuple[fx.GraphModule, list]:
    """The backward graph AOTAutograd makes for ``m`` on ``x`` (with ``decompositions``), and
    the arguments it ran with."""
    got = {}

    def fw(gm, _):
        return _torch.mark_boxed(lambda args: gm(*args))

    def bw(gm, example):
        got["bw"] = gm
        return _torch.mark_boxed(lambda args: (got.setdefault("args", list(args)), gm(*args))[1])

    from functorch.compile import aot_module

    loss(aot_module(m, fw_compiler=fw, bw_compiler=bw, decompositions=decompositions)(x)
         ).backward()
    return got["bw"], got["args"]


def test_the_pass_computes_weight_gradients_into_the_buffer_and_copies_the_rest():
    bw, args = _backward_graph()
    outputs = deliverable(bw, torch.device("cpu"), range(6))
    assert outputs == [0, 1, 2, 3, 4, 5]  # every parameter's gradient (the input needs none)
    gm, delivered = deliver_outputs(bw, outputs, None)
    outs = {n.name: n for n in gm.graph.nodes}
    # Linear weights: their mm computes into the buffer; biases: sum writes it; LayerNorm's
    # backward returns three values and has no out= form for them: one copy each.
    assert [d.in_place for d in delivered] == [True, True, False, False, True, True]
    written = [n for n in gm.graph.nodes if n.kwargs.get("out") is not None]
    assert sorted(str(n.target) for n in written) == [
        "aten.mm.out", "aten.mm.out", "aten.sum.IntList_out", "aten.sum.IntList_out"]
    copies = [n for n in gm.graph.nodes if n.target is aten.copy_.default]
    assert [c.args[1].name for c in copies] == ["getitem_4", "getitem_5"]
    assert all(c.args[0].name.startswith("grad_out_") for c in copies)
    assert "grad_out_0" in outs and "mm_2" in outs
    # Numerics: the same gradients, bitwise, and each one lives in its buffer region.
    geometry, nbytes = pack([(d.dtype, d.shape, d.stride) for d in delivered], 64)
    buffer = torch.empty(nbytes, dtype=torch.uint8)
    views = make_views(buffer.untyped_storage(), torch.device("cpu"), geometry)
    with torch.no_grad():  # as autograd runs a backward
        want = bw(*args)
        got = gm(*args, *views)
    lo, hi = buffer.data_ptr(), buffer.data_ptr() + nbytes
    for i in outputs:
        assert torch.equal(got[i], want[i]), f"gradient {i}"
        assert lo <= got[i].data_ptr() < hi, f"gradient {i} is not in the buffer"
    assert got[6] is None and want[6] is None


def test_inductor_form_writes_matmuls_through_into_ops():
    bw, _ = _backward_graph()
    gm, delivered = deliver_outputs(bw, deliverable(bw, torch.device("cpu"), range(6)),
                                  lambda op: getattr(op, "overloadpacket", None) is aten.mm)
    into = [n for n in gm.graph.nodes if "_into" in str(n.target)]
    assert len(into) == 2 and all(n.kwargs["out"].name.startswith("grad_out_") for n in into)
    # Inductor generates the sums' kernels itself: it stores their values into the buffer.
    assert [d.in_place for d in delivered] == [True, False, False, False, True, False]


def _embedding_backward() -> tuple[fx.GraphModule, list]:
    """The backward graph ``torch.compile``'s decompositions make for an fp32 embedding with a
    padding index, then a Linear: the embedding's gradient is a masked scatter-add over zeros."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Embedding(32, 8, padding_idx=0), nn.Linear(8, 4))
    return _traced_backward(m, torch.tensor([[0, 3, 3, 31], [5, 3, 0, 7]]),
                            _torch.inductor_decompositions(), lambda y: y.pow(2).sum())


def test_inductor_form_scatters_an_embedding_gradient_into_its_buffer():
    """Copied, the scatter ran into a buffer of Inductor's and was copied: one temporary and one
    copy of the embedding's size. Now the buffer is zeroed and scattered into, with the masked
    values and clamped indices Inductor's lowering of the masked form uses, and the same
    gradients to the bit (one thread adds them in index order)."""
    bw, args = _embedding_backward()
    outputs = deliverable(bw, torch.device("cpu"), range(3))
    gm, delivered = deliver_outputs(bw, outputs, lambda op: False)
    assert [d.in_place for d in delivered] == [True, False, False]
    (put,) = [n for n in gm.graph.nodes if n.target is aten.index_put_.default]
    assert put.args[0].target is aten.fill_.Scalar and put.args[0].args == (
        gm.graph.find_nodes(op="placeholder")[-3], 0)
    assert sorted(c.args[0].name for c in gm.graph.nodes if c.target is aten.copy_.default) == [
        "grad_out_1", "grad_out_2"]  # the Linear's weight and bias: Inductor stores them
    assert not any("masked_index_put" in str(n.target) or n.target is aten.full.default
                   and n.args[0] for n in gm.graph.nodes)
    geometry, nbytes = pack([(d.dtype, d.shape, d.stride) for d in delivered], 64)
    buffer = torch.full((nbytes,), 7, dtype=torch.uint8)  # not zero: the pass zeroes it
    views = make_views(buffer.untyped_storage(), torch.device("cpu"), geometry)
    with torch.no_grad():
        want, got = bw(*args), gm(*args, *views)
    assert torch.equal(got[0], want[0]) and got[0].data_ptr() == views[0].data_ptr()
    assert not got[0][0].any()  # the padding row's gradient stays zero


def test_a_scatter_over_zeros_it_also_reads_or_names_keeps_its_copy():
    """Only a scatter-add whose zeros nothing else reads, given positionally, is rewritten:
    zeros read as the values too would be erased under their reader, and values passed by
    keyword are not where the rewrite looks for them."""
    from fxslots.passes.deliver import _over_zeros

    def scatter(values_are_zeros: bool, by_keyword: bool) -> fx.Node:
        g = fx.Graph()
        idx, vals = g.placeholder("idx"), g.placeholder("vals")
        zeros = g.call_function(aten.full.default, ([4, 4], 0), {"dtype": torch.float32})
        args, kwargs = (zeros, [idx]), {"values": vals, "accumulate": True}
        if not by_keyword:
            args, kwargs = (*args, zeros if values_are_zeros else vals, True), {}
        put = g.call_function(aten.index_put.default, args, kwargs)
        put.meta["val"] = torch.empty(4, 4)
        return put

    assert _over_zeros(scatter(False, False))
    assert not _over_zeros(scatter(True, False)) and not _over_zeros(scatter(False, True))


def _region_buffer():
    (region,) = fxslots.regions()
    (buffer,) = region.outputs.values()  # one parameter set
    return buffer


def _record_kinds(monkeypatch, forward: bool = False) -> list[OutKind]:
    """The kinds of every non-constant output of the backward graphs captured from now on
    (``forward``: of the user outputs of the forward graphs)."""
    kinds: list[OutKind] = []
    describe = executor.describe_outputs

    def recording(outs, gargs, arenas, staged, copied=0):
        described = describe(outs, gargs, arenas, staged, copied)
        if (OutKind.SLOT in arenas.values()) == forward:  # only a forward's has the slot
            kinds.extend(o.kind for o in (described[:copied] if forward else described)
                         if o.kind is not OutKind.CONST)
        return described

    monkeypatch.setattr(executor, "describe_outputs", recording)
    return kinds


def test_inductor_warm_up_leaves_delivered_gradients_in_the_buffer(stand_in_graphs,  # noqa: F811
                                                                     monkeypatch):
    """Inductor's delivering twin delivers in its warm-up too: the gradients it wrote into the
    region's output buffer stay there (compacted into a second buffer, llama-large held its
    0.92 GiB of gradients twice at the end of its warm-up, H200 run 40b); the steps after
    replay into the same place, and every step is torch.compile's, bitwise. (With
    ``grads_in_arena``, the steps after the first go into the arena: tests/test_fence.py.)"""
    fresh = []
    real = staging.fresh_views
    monkeypatch.setattr(staging, "fresh_views", lambda *a: fresh.append(a) or real(*a))
    torch.manual_seed(0)
    m = MLP(16, 32, 3)
    ref = MLP(16, 32, 3)
    ref.load_state_dict(m.state_dict())
    c = torch.compile(m, backend="fxslots", options={"slots": 1, "kernels": "inductor",
                                                     "grads_in_arena": False})
    r = torch.compile(ref)
    addresses = []
    for _ in range(4):
        x = torch.randn(4, 16)
        c(x).sum().backward()
        r(x).sum().backward()
        buf = _region_buffer().tensor
        lo, hi = buf.data_ptr(), buf.data_ptr() + buf.numel()
        assert all(lo <= p.grad.data_ptr() < hi for p in m.parameters())
        addresses.append(tuple(p.grad.data_ptr() for p in m.parameters()))
        for p, q in zip(m.parameters(), ref.parameters(), strict=True):
            assert torch.equal(p.grad, q.grad)
        m.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
    assert fresh == [] and len(set(addresses)) == 1 and _StandInGraph.replays > 0


def test_captured_backward_delivers_gradients_bitwise(stand_in_graphs, monkeypatch):  # noqa: F811
    kinds = _record_kinds(monkeypatch)
    torch.manual_seed(0)
    model, xs = MLP(16, 32, 3), [torch.randn(4, 16) for _ in range(4)]
    sched = schedule_ffbb(2) + [(op, i + 2) for op, i in schedule_1f1b(2, 2)]
    ours = run(model, "fxslots", xs, sched, steps=4, options={"slots": 2})
    assert _StandInGraph.replays > 0
    assert OutKind.BUFFER in kinds and OutKind.POOL not in kinds, kinds
    assert_same(ours, run(model, "aot_eager", xs, sched, steps=4))


def test_gradients_land_in_the_output_buffer_and_stay_there(stand_in_graphs):  # noqa: F811
    """With ``grads_in_arena`` off (tests/test_overlay.py has it on)."""
    torch.manual_seed(0)
    m = MLP(16, 32, 3)
    c = torch.compile(m, backend="fxslots", options={"slots": 1, "grads_in_arena": False})
    c(torch.randn(4, 16)).sum().backward()
    # The first backward warms up with the plain graph (the same ATen kernels): no buffer is
    # held while it runs, as none was before delivery (the warm-up's peak stays eager's).
    assert all(b.tensor is None for b in fxslots.regions()[0].outputs.values())
    m.zero_grad(set_to_none=True)
    addresses = set()
    for step in range(5):
        c(torch.randn(4, 16)).sum().backward()
        buf = _region_buffer().tensor
        lo, hi = buf.data_ptr(), buf.data_ptr() + buf.numel()
        assert all(lo <= p.grad.data_ptr() < hi for p in m.parameters()), step
        addresses.add(tuple(p.grad.data_ptr() for p in m.parameters()))
        m.zero_grad(set_to_none=True)
    assert len(addresses) == 1
    assert _region_buffer().held == 0


def test_gradients_the_caller_keeps_are_never_overwritten(stand_in_graphs,  # noqa: F811
                                                          monkeypatch):
    """A caller that keeps every step's gradients: each backward finds the last ones held, so
    the buffer moves (and the graph is captured again) until delivery stops for the region;
    what the caller kept stays what it was, and every step matches eager."""
    kinds = _record_kinds(monkeypatch)
    torch.manual_seed(0)
    m = MLP(16, 32, 3)
    e = MLP(16, 32, 3)
    e.load_state_dict(m.state_dict())
    c = torch.compile(m, backend="fxslots", options={"slots": 1})
    kept, copies = [], []
    for _ in range(staging.HELD_LIMIT + 4):
        x = torch.randn(4, 16)
        c(x).sum().backward()
        e(x).sum().backward()
        for p, q in zip(m.parameters(), e.parameters(), strict=True):
            assert torch.equal(p.grad, q.grad)
        kept.append([p.grad for p in m.parameters()])
        copies.append([p.grad.clone() for p in m.parameters()])
        m.zero_grad(set_to_none=True)
        e.zero_grad(set_to_none=True)
    for k, c_ in zip(kept, copies, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(k, c_, strict=True))
    assert _region_buffer().held > staging.HELD_LIMIT
    assert OutKind.BUFFER in kinds and OutKind.POOL in kinds  # copied out once it stopped


def test_inductor_backward_delivers_bitwise_torch_compile(stand_in_graphs,  # noqa: F811
                                                          monkeypatch):
    kinds = _record_kinds(monkeypatch)
    torch.manual_seed(0)
    model, xs = Attention(16, 2), [torch.randn(2, 4, 16) for _ in range(2)]
    sched = schedule_ffbb(2)
    ours = run(model, "fxslots", xs, sched, steps=3, options={"slots": 2, "kernels": "inductor"})
    assert fxslots.counters["inductor_fallbacks"] == 0
    assert OutKind.BUFFER in kinds and OutKind.POOL not in kinds, kinds
    assert_same(ours, run(model, "inductor", xs, sched, steps=3))



@pytest.mark.cuda
def test_cuda_delivered_gradients_match_eager_and_survive_replays():
    """On real CUDA graphs: gradients land in the output buffer, match eager's, and gradients
    the caller keeps are not overwritten by later replays (delivery then stops)."""
    torch.manual_seed(0)
    m = MLP(64, 256, 4).cuda()
    e = MLP(64, 256, 4).cuda()
    e.load_state_dict(m.state_dict())
    c = torch.compile(m, backend="fxslots", options={"slots": 1})
    for step in range(6):
        x = torch.randn(32, 64, device="cuda")
        c(x).sum().backward()
        e(x).sum().backward()
        for p, q in zip(m.parameters(), e.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
        if step >= 3:  # in an output buffer, or (grads_in_arena) in the slot's arena
            (region,) = fxslots.regions()
            places = [b.tensor for b in (*region.outputs.values(),
                                         *region.placed_outputs.values())]
            spans = [(t.data_ptr(), t.data_ptr() + t.numel())
                     for t in (*places, region.ring.slots[0].arena) if t is not None]
            assert all(any(lo <= p.grad.data_ptr() < hi for lo, hi in spans)
                       for p in m.parameters()), step
        m.zero_grad(set_to_none=True)
        e.zero_grad(set_to_none=True)
    assert fxslots.counters["captures"] > 0
    kept, copies = [], []
    for _ in range(staging.HELD_LIMIT + 3):
        c(torch.randn(32, 64, device="cuda")).sum().backward()
        kept.append([p.grad for p in m.parameters()])
        copies.append([p.grad.clone() for p in m.parameters()])
        m.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    for k, c_ in zip(kept, copies, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(k, c_, strict=True))


def test_dynamic_shapes_and_a_graph_break_deliver_bitwise(stand_in_graphs,  # noqa: F811
                                                          monkeypatch):
    """Two regions (a graph break), batch sizes that make Dynamo's shapes dynamic: parameter
    gradients (static shapes) are delivered by each region into its own buffer."""
    kinds = _record_kinds(monkeypatch)

    class Broken(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = MLP(16, 32, 2), MLP(16, 32, 2)

        def forward(self, x):
            y = self.a(x)
            torch._dynamo.graph_break()
            return self.b(torch.tanh(y))

    torch.manual_seed(0)
    model = Broken()
    xs = [torch.randn(n, 16) for n in (4, 4, 6, 6, 8, 8)]
    sched = [op for i in range(6) for op in (("F", i), ("B", i))]
    ours = run(model, "fxslots", xs, sched, steps=3, options={"slots": 1})
    assert OutKind.BUFFER in kinds
    assert_same(ours, run(model, "aot_eager", xs, sched, steps=3))


def test_autograd_grad_results_the_caller_keeps_stay_intact(stand_in_graphs):  # noqa: F811
    """``torch.autograd.grad`` hands the gradients to the caller, who may keep them (a
    zero-bubble schedule's weight gradients): later backwards never write over them."""
    torch.manual_seed(0)
    m = MLP(16, 32, 3)
    e = MLP(16, 32, 3)
    e.load_state_dict(m.state_dict())
    c = torch.compile(m, backend="fxslots", options={"slots": 1})
    kept = []
    for _ in range(6):
        x = torch.randn(4, 16)
        got = torch.autograd.grad(c(x).sum(), list(m.parameters()))
        want = torch.autograd.grad(e(x).sum(), list(e.parameters()))
        kept.append((got, [w.clone() for w in want]))
    for got, want in kept:
        assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


def test_explain_shows_the_delivering_backward(stand_in_graphs):  # noqa: F811
    torch.manual_seed(0)
    report = fxslots.explain(MLP(16, 32, 2), torch.randn(4, 16))
    text = str(report)
    assert "backward, delivering its gradients into the output buffer" in text
    assert "mm.out" in text and "grad_out_0" in text


def test_a_failing_delivery_pass_falls_back_with_a_warning(stand_in_graphs,  # noqa: F811
                                                           monkeypatch):
    """The delivering twin only spares a copy: a pass failing on a graph it did not foresee
    leaves training on the plain backward (gradients copied out), with one warning naming it;
    ``strict=True`` raises."""
    from fxslots import grads

    def broken(*args, **kwargs):
        raise RuntimeError("an unforeseen graph")

    monkeypatch.setattr(grads, "deliver_outputs", broken)
    torch.manual_seed(0)
    model, xs = MLP(16, 32, 3), [torch.randn(4, 16) for _ in range(2)]
    sched = schedule_ffbb(2)
    with pytest.warns(UserWarning, match="without the delivering twin .* an unforeseen graph"):
        ours = run(model, "fxslots", xs, sched, steps=3, options={"slots": 2})
    assert fxslots.counters["twin_fallbacks"] == 1
    assert_same(ours, run(model, "aot_eager", xs, sched, steps=3))
    with pytest.raises(Exception, match="an unforeseen graph"):
        run(model, "fxslots", xs, sched, options={"slots": 2, "strict": True})


def test_a_buffer_replaced_every_step_never_settles_the_allocator(stand_in_graphs,  # noqa: F811
                                                                  monkeypatch):
    """A caller that keeps every step's gradients retires the output buffer each backward:
    its replacement is allocated without emptying the allocator's cache (``alloc.lasting``'s
    ``settle``, a device sync on CUDA), which only first and growing allocations do."""
    calls = []
    real = staging.lasting
    monkeypatch.setattr(staging, "lasting",
                        lambda n, d, settle=True: (calls.append(settle), real(n, d, settle))[1])
    torch.manual_seed(0)
    m = MLP(16, 32, 3)
    c = torch.compile(m, backend="fxslots", options={"slots": 1})
    kept = []
    for step in range(6):
        if step == 3:
            settled, start = calls.count(True), len(calls)
        kept.append(torch.autograd.grad(c(torch.randn(4, 16)).sum(), list(m.parameters())))
    assert _region_buffer().held >= 3 and False in calls[start:]
    assert calls.count(True) == settled, calls
