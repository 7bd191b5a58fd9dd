"""Offload (issue 10): policies, their reasons, and the stream nodes in both graphs. Numerics
are bitwise against eager on CPU, where the side-stream copies run at once; the GPU half (real
streams, a delayed side stream) is in tests/test_cuda.py."""

from __future__ import annotations

import copy
import dataclasses
import operator
import re
import warnings

import pytest
import sympy
import torch

import fxslots
from examples.llama import SIZES, Llama, batch
from examples.models import MLP
from fxslots import streams
from fxslots.schemas import Write
from tests.helpers import compiled_twins, with_caps


def _train(model, make, options, steps=2, slots=2):
    torch.manual_seed(0)
    eager = copy.deepcopy(model)
    c = torch.compile(model, backend="fxslots", options={"slots": slots, **options})
    for _ in range(steps):
        args = [make() for _ in range(slots)]
        outs = [c(*a) for a in args]
        for o in outs:
            o.float().sum().backward()
        for a in args:
            eager(*a).float().sum().backward()
    for a, b in zip(model.parameters(), eager.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)
    return c


def _plan(model, args, **options):
    report = fxslots.explain(model, *args, **options)
    (g,) = [g for g in report.graphs if g.plan is not None]
    return g


@pytest.mark.parametrize("spec", ["all", "auto", "auto:0.5", 4096, "above:600",
                                  lambda t: t.dtype == torch.float32],
                         ids=["all", "auto", "auto-share", "budget", "above", "predicate"])
def test_every_policy_trains_bitwise_as_eager(spec):
    cfg = SIZES["llama-tiny"]
    _train(Llama(cfg), lambda: batch(cfg, 2, 16), {"offload": spec})


def test_budget_bounds_the_device_saved_bytes():
    cfg = SIZES["llama-tiny"]
    args = batch(cfg, 2, 16)
    full = int(_plan(Llama(cfg), args).plan.slot_bytes)
    fxslots.reset()
    g = _plan(Llama(cfg), args, offload=full // 2)
    assert int(g.plan.slot_bytes) <= full // 2 * 1.05
    assert int(g.plan.offloaded_bytes) > 0
    assert all("budget" in p.reason for p in g.plan.placements if p.write is Write.OFFLOAD)


def test_auto_says_why_for_every_group():
    cfg = SIZES["llama-tiny"]
    # A slow link carries nothing under this tiny model's compute; a fast one carries it all.
    slow = _plan(Llama(cfg), batch(cfg, 2, 16), offload="auto", link_bandwidth=1.0)
    assert int(slow.plan.offloaded_bytes) == 0
    assert any("would not hide under compute" in p.reason for p in slow.plan.placements)
    fxslots.reset()
    fast = _plan(Llama(cfg), batch(cfg, 2, 16), offload="auto", link_bandwidth=1e18)
    moved = [p for p in fast.plan.placements if p.write is Write.OFFLOAD]
    assert moved and all("auto:" in p.reason and "GB/s" in p.reason for p in moved)


def _offloaded(spec, link=1e9):
    fxslots.reset()
    cfg = SIZES["llama-tiny"]
    torch.manual_seed(0)
    return _plan(Llama(cfg), batch(cfg, 2, 16), offload=spec, link_bandwidth=link).plan


def test_auto_with_a_share_fills_that_share_of_the_link():
    """``"auto:<share>"`` fills only the first ``share`` of the forward's time with copies (and
    of the backward's time before each reload's first read): fewer bytes, each reason naming
    the share; ``"auto"`` is ``AUTO_SHARE``'s (bad shares: ``test_bad_offload_option_...``)."""
    from fxslots.offloading import AUTO_SHARE

    full, half = _offloaded("auto"), _offloaded("auto:0.5")
    assert 0 < int(half.offloaded_bytes) < int(full.offloaded_bytes)
    assert int(_offloaded(f"auto:{AUTO_SHARE}").offloaded_bytes) == int(full.offloaded_bytes)
    moved = [p.reason for p in half.placements if p.write is Write.OFFLOAD]
    kept = [p.reason for p in half.placements if "would not hide" in p.reason]
    assert moved and kept and all("(share 0.5)" in r for r in moved + kept)


def _auto_dynamic_llama(seqs):
    """A tiny Llama under ``dynamic=True`` and auto offload (a link so fast that every group
    hides), trained at each sequence length in turn beside eager, gradients checked bitwise:
    fxslots' compile count after each call, and the eager model."""
    cfg = SIZES["llama-tiny"]
    torch.manual_seed(0)
    model = Llama(cfg)
    eager = copy.deepcopy(model)
    c = torch.compile(model, backend="fxslots", dynamic=True,
                      options={"offload": "auto", "link_bandwidth": 1e18})
    compiles = []
    for seq in seqs:
        args = batch(cfg, 2, seq)
        c(*args).backward()
        eager(*args).backward()
        compiles.append(fxslots.counters["compiles"])
    for a, b in zip(model.parameters(), eager.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)
    return compiles, eager


def test_auto_under_dynamic_shapes_compiles_again_for_a_larger_shape():
    """Auto's choice holds up to the shape it was timed at; a larger one moves more bytes under
    compute that grows less (H200 run 27c: planned at sequence 256, run at 512, 1.27x no
    offload). A dynamic graph with groups offloaded is guarded on its sizes: smaller shapes
    reuse it, a larger one compiles again and is planned at its own size. Gradients stay
    eager's throughout; a policy that times nothing ("all") adds no guard."""
    with fxslots.report.recording() as records:
        compiles, eager = _auto_dynamic_llama((32, 16, 24, 48, 40))
    assert compiles[0] == compiles[2] and compiles[3] > compiles[2] and compiles[4] == compiles[3]
    planned = [g for g in records if g.plan is not None]
    for g, seq in zip(planned, (32, 48), strict=True):  # the larger shape planned at its own
        moved = [p for p in g.plan.placements if p.write is Write.OFFLOAD]
        assert moved and all(f"={seq}" in p.reason and "larger shapes compile again" in p.reason
                             for p in moved)
    fxslots.reset()
    c = torch.compile(copy.deepcopy(eager), backend="fxslots", dynamic=True,
                      options={"offload": "all"})
    for seq in (32, 48):
        c(*batch(SIZES["llama-tiny"], 2, seq)).backward()
        compiles.append(fxslots.counters["compiles"])
    assert compiles[-1] == compiles[-2]


def test_auto_guards_nothing_when_its_plan_falls_back(monkeypatch):
    """Auto's guards go in only once its plan is accepted: a graph whose rewrite then fails
    runs without slots (one warning) and offloads nothing, so a larger shape reuses it, not
    compiles again as a guarded graph would; gradients are eager's."""
    from fxslots.passes import rewrite

    def broken(*args, **kwargs):
        raise KeyError("injected failure")

    monkeypatch.setattr(rewrite, "_write_in_place", broken)
    with pytest.warns(UserWarning, match="rewrite_forward failed"):
        compiles, _ = _auto_dynamic_llama((16, 32))
    assert compiles[0] == compiles[1] and fxslots.counters["fallbacks"] >= 1


@pytest.mark.parametrize("rows,mark,says", [
    ((64, 96), {"min": 2, "max": 4096}, "a size range of its own"),
    ((2, 5), {}, "a size marked dynamic is at its least value")], ids=["range", "least"])
def test_auto_leaves_a_range_the_user_gave_unguarded(caplog, rows, mark, says):
    """``mark_dynamic(..., min=, max=)`` asks for one graph over that range: a guard below it
    would fail the compile (Dynamo's ConstraintViolationError). So would a guard at the least
    size a plain ``mark_dynamic`` allows (2: it pins the size; found by a review: the first
    forward raised). Auto plans at the shape it compiles and says so; training goes on,
    gradients eager's, one graph for both shapes."""
    import logging

    torch.manual_seed(0)
    model = MLP(64, 256, 4)
    eager = copy.deepcopy(model)
    c = torch.compile(model, backend="fxslots",
                      options={"offload": "auto", "link_bandwidth": 1e18})
    compiles = []
    with caplog.at_level(logging.WARNING, logger="fxslots"):
        for n in rows:
            x = torch.randn(n, 64)
            torch._dynamo.mark_dynamic(x, 0, **mark)
            c(x).sum().backward()
            eager(x).sum().backward()
            compiles.append(fxslots.counters["compiles"])
    assert compiles[0] == compiles[1]
    assert [r for r in caplog.records if says in r.getMessage()]
    for a, b in zip(model.parameters(), eager.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)


def test_auto_leaves_groups_too_small_to_pay_for_their_copy(monkeypatch):
    """Each copy costs a fixed time besides its bytes (a copy node in the captured graph and
    the copy engine's setup: ``DeviceCaps.copy_latency``, 8 us on CUDA). On llama-small auto
    moved 77 groups per forward, down to 4-byte RNG offsets and 4 KiB RMSNorm scales, and
    the step ran 1.13x no offload (H200 run 21): smaller groups stay on the device."""
    cfg = SIZES["llama-tiny"]
    latency = 1e-6
    with_caps(monkeypatch, copy_latency=latency)
    g = _plan(Llama(cfg), batch(cfg, 2, 16), offload="auto", link_bandwidth=4e9)
    floor = latency * 4e9  # 4000 bytes
    sizes = {p.group: int(p.nbytes) for p in g.plan.placements}
    moved = [p for p in g.plan.placements if p.write is Write.OFFLOAD]
    kept = [p for p in g.plan.placements if "frees less than a copy costs" in p.reason]
    assert moved and kept
    assert all(sizes[p.group] >= floor for p in moved)
    assert all(sizes[p.group] < floor and p.write is not Write.OFFLOAD for p in kept)


def test_every_kernel_costs_at_least_the_floor_and_views_cost_nothing():
    """The roofline put llama-small's forward at 0.65 ms against 2.2 measured: 1360 small
    kernels a step, each taking about 4 us in a captured graph whatever its bytes (H200 run
    21). ``DeviceCaps.kernel_floor`` is that least time; a big matrix product keeps its
    roofline time, and a view launches nothing."""
    from dataclasses import replace

    from torch.fx.experimental.proxy_tensor import make_fx

    from fxslots.costs import caps_for, graph_seconds

    def f(a, b):
        return (a @ b).relu().t()

    gm = make_fx(f)(torch.randn(512, 512), torch.randn(512, 512))
    caps = replace(caps_for(torch.device("cpu"), 1e10), kernel_floor=4e-6)
    secs = {n.target.__name__.split(".")[0]: s for n, s in graph_seconds(gm, caps)
            if n.op == "call_function"}
    assert secs["t"] == 0.0 and secs["relu"] == 2 * 512 * 512 * 4 / caps.hbm > 4e-6
    caps = replace(caps, hbm=1e15)  # now the relu's bytes take less than the floor
    secs = {n.target.__name__.split(".")[0]: s for n, s in graph_seconds(gm, caps)
            if n.op == "call_function"}
    assert secs["relu"] == 4e-6 and secs["mm"] == 2 * 512**3 / caps.flops_32 > 4e-6
    cuda = torch.device("cuda")
    assert caps_for(cuda, 1e10).kernel_floor == caps_for(cuda, 1e10, fused=True).kernel_floor
    assert caps_for(cuda, 1e10, fused=True).fused and not caps_for(cuda, 1e10).fused


def test_under_inductor_a_fused_chain_costs_one_pass_and_one_floor():
    """Under kernels="inductor" the ops Inductor generates fuse: GELU's five pointwise ATen
    nodes after a matmul are one kernel that reads the matmul's result and writes GELU's
    once. Charged node by node, heavy's forward came out about twice what ran, and auto
    moved 1.54x what the link carried in it (H100 run 52a: 1.70x no offload's step)."""
    from dataclasses import replace

    from torch.fx.experimental.proxy_tensor import make_fx

    from fxslots import _torch
    from fxslots.costs import Fusion, caps_for, graph_seconds

    def f(x, w):
        return torch.nn.functional.gelu(x @ w) * 2

    n = 1024
    gm = make_fx(f, decomposition_table=_torch.inductor_decompositions())(
        torch.randn(n, n), torch.randn(n, n))
    caps = replace(caps_for(torch.device("cpu"), 1e10), kernel_floor=4e-6)
    unfused = dict(graph_seconds(gm, caps))
    fused = dict(graph_seconds(gm, replace(caps, fused=True)))
    chain = [x for x in gm.graph.nodes if x.op == "call_function" and x.target not in (
        torch.ops.aten.mm.default,)]
    assert len(chain) >= 5  # mul, mul, erf, add, mul, mul
    one_pass = 2 * n * n * 4 / caps.hbm  # read the product, write the result
    assert sum(fused[x] for x in chain) == pytest.approx(one_pass)
    assert sum(unfused[x] for x in chain) >= 5 * one_pass
    fusion = Fusion.of(gm)  # one kernel, which stores once: only its end pays the floor
    assert len({fusion.kernel[x] for x in chain}) == 1 and fusion.stored & set(chain) == {
        chain[-1]}
    mm = next(x for x in gm.graph.nodes if x.target is torch.ops.aten.mm.default)
    assert fused[mm] == unfused[mm] == 2 * n**3 / caps.flops_32


def test_reloads_fit_when_one_queue_ends_each_before_it_is_needed():
    """(needed at, transfer time), earliest needed first from the backward's start. H200 run
    21: auto chose groups the backward reads at once (llama-small's last layers), whose
    reloads nothing could hide: 1.08x no offload with 17% of the copy time exposed."""
    from fxslots.offloading import reloads_fit

    assert reloads_fit([(3.0, 1.0), (1.0, 1.0), (2.0, 1.0)])
    assert not reloads_fit([(3.0, 1.0), (1.0, 1.0), (1.5, 1.0)])  # the second ends at 2.0
    assert not reloads_fit([(0.0, 1e-6)])  # read at once: nothing to hide under
    assert reloads_fit([])


def test_auto_reloads_each_group_before_the_backward_reads_it():
    cfg = SIZES["llama-tiny"]
    g = _plan(Llama(cfg), batch(cfg, 2, 16), offload="auto", link_bandwidth=2e6)
    moved = [p for p in g.plan.placements if p.write is Write.OFFLOAD]
    refused = [p for p in g.plan.placements if "would not hide" in p.reason]
    assert moved and refused
    assert all("reloaded before" in p.reason for p in moved)


def test_a_measurement_inside_a_compile_uses_real_tensors():
    """Backends run under the compile's FakeTensorMode: the host link timed there copied fake
    tensors in no time, so ``offload="auto"`` took the link as unbounded and moved nearly every
    byte (H200 run 15). ``costs.measured_link`` times inside ``_torch.real_tensors()``."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from fxslots import _torch

    with FakeTensorMode():
        assert _torch.is_fake(torch.empty(4))
        with _torch.real_tensors():
            real = torch.empty(4)
        assert not _torch.is_fake(real)


def test_an_impossible_link_measurement_falls_back_to_a_nominal_one(caplog):
    from fxslots.costs import plausible_link

    assert plausible_link(55e9) == 55e9
    for bad in (0.0, 3e15, float("inf")):
        assert 1e9 < plausible_link(bad) < 1e11
    assert "no link reaches" in caplog.text and "link_bandwidth" in caplog.text


def test_graphs_copy_on_side_streams_and_join_before_use():
    g = _plan(MLP(), (torch.randn(4, 16),), offload="all")
    fw, bw = g.variant.forward_graph.graph, g.variant.backward_graph.graph
    targets = [n.target for n in fw.nodes]
    assert targets.count(streams.offload) == targets.count(streams.offload_wait) == 2
    for wait in fw.find_nodes(op="call_function", target=streams.offload_wait):
        assert wait.args[1].target is streams.offload  # joins its own copy, later
    reloads = list(bw.find_nodes(op="call_function", target=streams.reload))
    assert len(reloads) == 2
    order = {n: i for i, n in enumerate(bw.nodes)}
    for r in reloads:
        (wait,) = r.users
        (getitem,) = wait.users
        first_use = min(order[u] for u in getitem.users)
        assert order[r] < order[wait] < first_use
        # No placeholder that holds host bytes is read by anything but its reload.
        for host in r.args[1:]:
            assert set(host.users) == {r}


def test_forward_joins_move_later_with_join_slack(monkeypatch):
    """``DeviceCaps.join_slack`` plans each forward join for that many times the copy's
    estimated time (joins the estimate called just done stalled compute: H200 run 21); the
    backward's reloads keep the plain estimate."""
    def joins(slack):
        fxslots.reset()
        with_caps(monkeypatch, join_slack=slack)
        g = _plan(MLP(64, 256, 4), (torch.randn(256, 64),), offload="all",
                  link_bandwidth=1e11)
        fw, bw = g.variant.forward_graph.graph, g.variant.backward_graph.graph
        order = {n: i for i, n in enumerate(fw.nodes)}
        reloads = [i for i, n in enumerate(bw.nodes) if n.target is streams.reload]
        return [order[w] - order[w.args[1]] for w in fw.find_nodes(
            op="call_function", target=streams.offload_wait)], reloads

    plain, reloads = joins(1.0)
    slack, slack_reloads = joins(1e4)
    assert slack_reloads == reloads
    assert all(b >= a for a, b in zip(plain, slack, strict=True)) and slack != plain


def test_offloaded_groups_leave_the_device_arena():
    cfg = SIZES["llama-tiny"]
    args = batch(cfg, 2, 16)
    none = _plan(Llama(cfg), args)
    fxslots.reset()
    every = _plan(Llama(cfg), args, offload="all")
    assert int(every.plan.host_capacity) > 0
    assert int(every.plan.capacity) < int(none.plan.capacity)


@pytest.mark.parametrize("dynamic", [None, True])
def test_an_empty_batch_offloads_nothing_and_trains(dynamic):
    """A batch of zero rows (an empty shape bucket) plans a host arena of 0 bytes: its host
    views still view one (it raised a TypeError from ``set_(None)`` before)."""
    _rows_train_bitwise(compiled_twins(MLP, {"offload": "all"}, dynamic), (4, 0, 3, 0), (16,))


def _rows_train_bitwise(twins, rows, tail) -> None:
    """A step per row count of input ``(rows, *tail)``: input and parameter gradients of
    fxslots' twin bitwise aot_eager's."""
    ours, ref, f, g = twins
    for n in rows:
        x = torch.randn(n, *tail)
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        f(a).sum().backward()
        g(b).sum().backward()
        assert torch.equal(a.grad, b.grad), n
        for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
            assert torch.equal(p.grad, q.grad), n


class _Halves(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 16)

    def forward(self, x):
        a, b = self.lin(x).split(8, -1)  # both halves saved: views of one storage
        return torch.tanh(a) * b


@pytest.mark.parametrize("offload", ["none", "all"])
def test_an_empty_batch_keeps_saved_split_views_in_their_slot(offload):
    """At zero rows the second half of a split starts past the end of its group of 0 bytes:
    the verifier called that outside the group and the graph fell back, naming an internal
    assertion (found by a review). A member of no elements reads no bytes: slots kept, one
    graph, gradients aot_eager's."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _rows_train_bitwise(compiled_twins(_Halves, {"offload": offload, "strict": True}),
                            (0, 3), (5, 8))
    assert fxslots.counters["fallbacks"] == 0


@pytest.mark.parametrize("bad", ["some", "auto:0", "auto:1.5", "auto:", "auto:half", "all:1"])
def test_bad_offload_option_names_the_forms(bad):
    with pytest.raises(fxslots.OptionsError,
                       match="'auto', 'auto:<share>' .*'above:<bytes>', a budget.*got '" + bad):
        fxslots.Options(offload=bad)


def test_dynamic_shapes_are_sized_at_the_shape_compiled():
    """A budget and auto weigh a group at the shape being compiled, not at the smallest one
    the symbols allow (the H200 run found a budget that offloaded nothing under dynamic=True)."""
    cfg = SIZES["llama-tiny"]
    args = batch(cfg, 2, 32)
    static = int(_plan(Llama(cfg), args).plan.slot_bytes)
    fxslots.reset()
    g = _plan(Llama(cfg), args, dynamic=True, offload=static // 2)
    assert g.plan.offloaded_bytes != 0
    fxslots.reset()
    slow = _plan(Llama(cfg), args, dynamic=True, offload="auto", link_bandwidth=1.0)
    assert slow.plan.offloaded_bytes == 0


def test_a_predicate_over_sizes_decides_at_the_shape_compiled():
    """Under dynamic shapes a predicate sees the sizes being compiled for, and its reason says
    which: as symbols they compare to no truth value, and such a graph ran without slots
    (found by a review). ``fxslots.prepare`` compiles the largest first."""
    cfg = SIZES["llama-tiny"]

    def large(t):
        return t.nbytes >= 8192
    offloaded = []
    for seq in (4, 32):
        fxslots.reset()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            g = _plan(Llama(cfg), batch(cfg, 2, seq), dynamic=True, offload=large)
        offloaded.append(g.plan.offloaded_bytes != 0)
    assert offloaded == [False, True]
    (why,) = {p.reason for p in g.plan.placements if p.write is Write.OFFLOAD}
    assert re.fullmatch(r"predicate large \(decided at s\d+=\d+, s\d+=\d+\)", why), why
    assert "=32" in why
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _rows_train_bitwise(compiled_twins(MLP, {"offload": large}, True), (32, 5, 40), (16,))


class _SaveSlices(torch.autograd.Function):
    """Saves 40 slices of 4 floats: 40 groups of 16 B, each padded to the arena's alignment."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(*[x[i:i + 4].sin() for i in range(40)])
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2 + sum(t.sum() for t in ctx.saved_tensors)


class _Slices(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(44))

    def forward(self, x):
        return _SaveSlices.apply(x * self.w)


@pytest.mark.parametrize("alignment", [512, 2048])
def test_a_budget_counts_each_group_at_what_it_holds_of_the_arena(alignment):
    """The arena pads every group to ``alignment``: 40 groups of 16 B (640 saved bytes) hold
    20 KiB of it at 512. A budget of 1000 B that summed the raw bytes kept them all, a device
    arena 20x the budget while each reason said the rest fits in 640 B (found by a review).
    Each group now counts at its aligned bytes, and the reasons quote them; at 2048 no group
    fits, so all go. Gradients aot_eager's."""
    torch.manual_seed(0)
    g = _plan(_Slices(), (torch.randn(44),), slots=1, offload=1000, alignment=alignment)
    assert int(g.plan.capacity) <= 1000 * 1.05
    moved = [p for p in g.plan.placements if p.write is Write.OFFLOAD]
    assert len(moved) == (39 if alignment == 512 else 40)
    assert all(f"{alignment} B of the device arena" in p.reason for p in moved)
    kept = [p.reason for p in g.plan.placements if p.write in (Write.OUT, Write.COPY)]
    assert len(kept) == (1 if alignment == 512 else 0)
    assert all("the rest fits (512 B of the device arena)" in r for r in kept)
    twins = compiled_twins(_Slices, {"offload": 1000, "alignment": alignment, "slots": 1})
    _rows_train_bitwise(twins, (44, 44), ())


def test_a_budget_holds_at_every_shape_under_dynamic_shapes():
    """A budget weighed at the shape compiled held only there: a dynamic graph then ran larger
    shapes with the same choice, and its device arena grew past the budget with one compile
    and no warning (found by a review). As auto's, its choice is bounded to the sizes it was
    made at (``offloading.bound_to_hints``): smaller shapes reuse the graph, a larger one
    compiles again and is weighed at its own size; at every shape the device arena per slot
    stays within the budget, gradients aot_eager's."""
    budget, compiles = 4096, []
    ours, ref, f, g = compiled_twins(lambda: MLP(16, 32, 2), {"offload": budget, "slots": 1},
                                     True)
    with fxslots.report.recording() as records:
        for n in (8, 4, 64, 32, 256):
            _rows_train_bitwise((ours, ref, f, g), (n,), (16,))
            compiles.append(fxslots.counters["compiles"])
            variant = [r for r in records if r.variant is not None][-1].variant
            assert variant.ring.slots[0].nbytes <= budget * 1.05, n
    assert compiles[0] == compiles[1] < compiles[2] == compiles[3] == compiles[4]
    first = [r for r in records if r.plan is not None][0].plan
    slotted = [p for p in first.placements if p.write is not Write.NONE]
    assert slotted and all(re.search(r"budget 4096 B: .*\(planned at s\d+=8; larger shapes "
                                     r"compile again\)", p.reason) for p in slotted)


def test_above_decides_at_the_sizes_compiled():
    """Under dynamic shapes ``above:<bytes>`` compared each group's bytes at the least value
    its symbols allow (2), a size that never runs: attention's scores, the only group that
    grows quadratically, weighed 64 B there against 256 B for each linear one, so a threshold
    could offload those and keep the scores, the largest at any sequence past 8 (found by a
    review: ``above:100``). It decides at the sizes being compiled, as a predicate does, and
    says so; gradients aot_eager's."""
    from examples.models import Attention

    torch.manual_seed(0)
    g = _plan(Attention(), (torch.randn(2, 32, 16),), dynamic=True, offload="above:8192")
    moved = [p for p in g.plan.placements if p.write is Write.OFFLOAD]
    kept = [p for p in g.plan.placements if "(above:8192" in p.reason and p not in moved]
    assert len(moved) == 1 and len(kept) == 4
    (scores,) = moved  # the only group quadratic in a symbol: 8*s0**2*s1 bytes
    assert any(sympy.degree(scores.nbytes, s) == 2 for s in scores.nbytes.free_symbols)
    at = r" \(above:8192; decided at s\d+=(\d+), s\d+=(\d+)\)"
    assert sorted(re.fullmatch("16384 B >= 8192 B" + at, scores.reason).groups()) == ["2", "32"]
    assert all(sorted(re.search("kept on the device: 4096 B < 8192 B" + at + "$",
                                p.reason).groups()) == ["2", "32"] for p in kept)
    _rows_train_bitwise(compiled_twins(MLP, {"offload": "above:4096"}, True), (64, 5, 80),
                        (16,))


class _SaveStrided(torch.autograd.Function):
    """Saves two strided views of one temporary: no one dense tensor covers the group, so it
    cannot be offloaded."""

    @staticmethod
    def forward(ctx, x):
        s = x.sin()
        ctx.save_for_backward(s[::2], s[1::4])
        return x * 2

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return g * 2 + a.sum() + b.sum()


class _SaveTwoDtypes(torch.autograd.Function):
    """Saves one temporary as float32 and as int32 views: a group of two dtypes, which a
    reload of one span of one dtype cannot restore."""

    @staticmethod
    def forward(ctx, x):
        s = x.sin()
        ctx.save_for_backward(s, s.view(torch.int32))
        return x * 2

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return g * a.cos() + (b & 1).float()


class _Stuck(torch.nn.Module):
    def __init__(self, fn=_SaveStrided):
        super().__init__()
        self.fn = fn
        self.w = torch.nn.Parameter(torch.randn(1024))

    def forward(self, x):
        return self.fn.apply(x * self.w)


@pytest.mark.parametrize("fn,spec,says", [
    (_SaveStrided, 0, "budget 0 B: cannot be offloaded: no one dense tensor covers its bytes"),
    (_SaveTwoDtypes, "all", "offload='all': cannot be offloaded: its tensors are of 2 dtypes")],
    ids=["unmet-budget", "all-two-dtypes"])
def test_a_group_no_policy_can_move_says_why_and_an_unmet_budget_warns(fn, spec, says):
    """A group that cannot be offloaded stayed on the device with no word from the policy, and
    a budget it put out of reach (offload=0) passed silently (found by a review). Its reason
    now says why it stays, and an unmet budget warns once: the budget, the bytes that stay
    and why. Gradients aot_eager's."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = _plan(_Stuck(fn), (torch.randn(1024),), slots=1, offload=spec)
    (slotted,) = [p for p in g.plan.placements if p.write is not Write.NONE]
    assert slotted.write is not Write.OFFLOAD and f"kept on the device: {says}" in slotted.reason
    unmet = [str(w.message) for w in caught if "is not met" in str(w.message)]
    if spec == 0:
        assert slotted.reason.endswith("; 4096 B stay on the device, over the budget")
        assert len(unmet) == 1 and re.match(
            r"fxslots: offload=0 \(a budget of device saved bytes per slot\) is not met: "
            r"4096 B stay on the device: g\d+ cannot be offloaded: no one dense", unmet[0])
    else:
        assert not unmet
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        twins = compiled_twins(lambda: _Stuck(fn), {"offload": spec, "slots": 1})
        _rows_train_bitwise(twins, (1024, 1024), ())


# The offload window (issue 10, item 1-2): the planners on plain numbers, then on graphs.

def _unit_caps(link=1.0):
    """A link of ``link`` bytes a second with no fixed cost (at 1, b bytes take b seconds)."""
    from fxslots.costs import DeviceCaps

    return DeviceCaps(1e12, 1e12, 1e12, link)


def test_joins_wait_for_the_link_only_when_the_window_is_full():
    from fxslots.passes.offload import plan_joins

    seconds, copies = [1.0] * 6, [(0, 2), (1, 2)]
    # Unbounded: copy 0 ends at 2 s, copy 1 (queued behind it) at 4 s; each is joined at the
    # first node that starts after.
    free = plan_joins(seconds, copies, _unit_caps(), 10**9)
    assert free.at == (2, 4) and free.held == ()
    # A 3-byte window has no room for copy 1 beside copy 0: copy 0 is joined before copy 1
    # starts (compute waits until 2 s), and copy 1 ends at 4 s, when node 3 starts.
    tight = plan_joins(seconds, copies, _unit_caps(), 3)
    assert tight.at == (1, 3) and tight.held == (0,)


def test_joins_within_join_every_share_one_wait():
    """Copies done within ``join_every`` of compute of the first are joined where the last is
    (one wait: the side stream's copies end in order); a copy the run would leave no room
    for in the window joins the run first, where its last was done."""
    from dataclasses import replace

    from fxslots.passes.offload import plan_joins, runs

    assert runs([0.0, 1.0, 1.5, 4.0, 4.2], 2.0) == [range(0, 3), range(3, 5)]
    seconds, copies = [1.0] * 12, [(0, 1), (1, 1), (2, 1), (6, 1)]
    # each 1-byte copy ends 1 s after it starts, and is joined at the next node
    assert plan_joins(seconds, copies, _unit_caps(), 10**9).at == (1, 2, 3, 7)
    merged = plan_joins(seconds, copies, replace(_unit_caps(), join_every=2.0), 10**9)
    assert merged.at == (3, 3, 3, 7)
    # 2-byte copies in a 3-byte window: copy 0 is joined before copy 1 starts (node 1)
    copies = [(0, 2), (1, 2), (2, 1), (6, 1)]
    assert plan_joins(seconds, copies, _unit_caps(), 3).at == (1, 3, 4, 7)
    # Merged over 5 s, copies 1 and 2 (done at nodes 3 and 4) would wait with copy 3's at
    # node 7, but copy 3 (node 6) has no room beside them: they are joined at node 4.
    tight = plan_joins(seconds, copies, replace(_unit_caps(), join_every=5.0), 3)
    assert tight.held == (0,) and tight.at == (1, 4, 4, 7)


def test_reloads_read_within_join_every_are_joined_at_the_first_read():
    from dataclasses import replace

    from fxslots.passes.offload import plan_reloads

    seconds, groups = [1.0] * 10, [(3, 4, 1), (4, 5, 1), (8, 9, 1)]
    plain = plan_reloads(seconds, groups, _unit_caps(), 10**9)
    assert plain.joined == (3, 4, 8) and plain.at == (2, 3, 7)
    merged = plan_reloads(seconds, groups, replace(_unit_caps(), join_every=1.0), 10**9)
    # group 1 is joined with group 0 at node 3, so its copy (behind group 0's) must end by
    # then: issued before node 1
    assert merged.joined == (3, 3, 8) and merged.at == (1, 2, 7)


@pytest.mark.parametrize("join_every,runs", [(1.0, 1), (1e-3, 2)])
def test_one_wait_joins_a_run_of_copies_and_comes_first(monkeypatch, join_every, runs):
    """With joins merged, every wait that does not wait (``wait=False``) sits right after the
    wait that joins it (only other waits between), which is for a copy later on the same
    stream; ``runs`` real waits per graph at least; gradients unchanged."""
    with_caps(monkeypatch, join_every=join_every)
    g = _plan(MLP(64, 256, 4), (torch.randn(256, 64),), offload="all", link_bandwidth=1e11)
    for graph, target, handle in ((g.variant.forward_graph.graph, streams.offload_wait, 1),
                                  (g.variant.backward_graph.graph, streams.reload_wait, 0)):
        nodes = list(graph.nodes)
        waits = [n for n in nodes if n.target is target]
        real = [w for w in waits if w.kwargs.get("wait", True)]
        assert len(real) >= runs and len(waits) > len(real)
        for w in set(waits) - set(real):
            before = nodes[nodes.index(w) - 1]
            while before.target in (target, operator.getitem) and before not in real:
                before = before.prev
            assert before in real, w
            assert nodes.index(before.args[handle]) > nodes.index(w.args[handle])
    _train(MLP(64, 256, 4), lambda: (torch.randn(32, 64),),
           {"offload": "all", "link_bandwidth": 1e11})


def test_reloads_wait_for_room_in_the_window():
    from fxslots.passes.offload import plan_reloads

    seconds = [1.0] * 8
    groups = [(2, 3, 2), (4, 5, 2), (6, 7, 2)]  # (first use, last use, bytes)
    # At 1 B/s each reload goes just in time: 2 s before its need, behind the one before.
    assert plan_reloads(seconds, groups, _unit_caps(), 10**9).at == (0, 2, 4)
    # A link too slow for any deadline: unbounded, every reload is issued at the start.
    slow = _unit_caps(0.1)
    assert plan_reloads(seconds, groups, slow, 10**9).at == (0, 0, 0)
    # Room for two: the third waits until group 0 is last read (node 3), issued before node 4.
    two = plan_reloads(seconds, groups, slow, 4)
    assert two.at == (0, 0, 4) and two.held == (2,)
    # Room for one: each waits for the one before it to be read, down to its own first use.
    one = plan_reloads(seconds, groups, slow, 2)
    assert one.at == (0, 4, 6) and one.held == (1, 2)


def test_reloads_still_go_as_late_as_the_link_allows():
    from fxslots.passes.offload import plan_reloads

    # A fast link: group 0 (needed at node 5, 1 s to move) goes before node 4; room is no issue.
    assert plan_reloads([1.0] * 8, [(5, 6, 1)], _unit_caps(), 10**9).at == (4,)


@pytest.mark.parametrize("join_every", [0.0, 2.0, 6.0])
@pytest.mark.parametrize("seed", range(40))
def test_the_window_bounds_the_bytes_in_transfer(seed, join_every):
    """At every copy's start, the copies not yet joined hold at most the window (or just the
    one copy, if it alone is larger); at every reload's issue, the reloads issued and still
    read hold at most the window with it (or it is issued where it is joined, at or before its
    first use: with no ``join_every``, reloads first read at one instant join at its first
    node)."""
    import random

    from fxslots.passes.offload import plan_joins, plan_reloads

    rng = random.Random(seed)
    n = 40
    seconds = [rng.choice([0.0, 0.5, 1.0, 3.0]) for _ in range(n)]
    window = rng.randint(1, 12)
    at = sorted(rng.sample(range(n - 1), 10))
    copies = [(p, rng.randint(1, 6)) for p in at]
    caps = dataclasses.replace(_unit_caps(), join_every=join_every)
    joins = plan_joins(seconds, copies, caps, window).at
    for k, (p, b) in enumerate(copies):
        waiting = sum(bj for j, (_, bj) in enumerate(copies[:k]) if joins[j] > p)
        assert waiting + b <= window or waiting == 0, (k, joins)
        assert joins[k] > p  # joined after it started
    firsts = sorted(rng.sample(range(2, n), 8))
    groups = [(f, rng.randint(f, n - 1), rng.randint(1, 6)) for f in firsts]
    plan = plan_reloads(seconds, groups, caps, window, first_op=1)
    issues = plan.at
    for g, (first, _, b) in enumerate(groups):
        p = issues[g]
        assert 1 <= p <= plan.joined[g] <= first
        live = sum(bh for h, (_, last, bh) in enumerate(groups[:g]) if issues[h] <= p <= last)
        assert live + b <= window or live == 0 or p == plan.joined[g], (g, issues)


def test_a_small_window_joins_each_copy_before_the_next_starts():
    """A link far slower than compute: with the default window every forward join waits for
    the output (the pool holds every offloaded value to the end), with a window smaller than two
    values each copy is joined before the next starts, and the gradients do not change."""
    def order(**options):
        fxslots.reset()
        g = _plan(MLP(64, 256, 4), (torch.randn(256, 64),), offload="all",
                  link_bandwidth=1e3, **options)
        nodes = list(g.variant.forward_graph.graph.nodes)
        starts = [i for i, n in enumerate(nodes) if n.target is streams.offload]
        waits = [i for i, n in enumerate(nodes) if n.target is streams.offload_wait]
        return starts, waits, nodes

    starts, waits, nodes = order()
    assert min(waits) > max(starts)  # all at the end
    starts, waits, nodes = order(offload_window=1)
    assert len(starts) >= 3
    for w, nxt in zip(waits, starts[1:], strict=False):
        assert w < nxt
    assert "joined early" in nodes[waits[0]].meta[fxslots.schemas.SLOT_META]
    _train(MLP(64, 256, 4), lambda: (torch.randn(32, 64),),
           {"offload": "all", "offload_window": 1, "link_bandwidth": 1e3})


def test_a_small_window_issues_each_reload_after_the_last_read_before():
    fxslots.reset()
    g = _plan(MLP(64, 256, 4), (torch.randn(256, 64),), offload="all", link_bandwidth=1e3,
              offload_window=1)
    nodes = list(g.variant.backward_graph.graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    reloads = [n for n in nodes if n.target is streams.reload]
    assert len(reloads) >= 3
    for a, b in zip(reloads, reloads[1:], strict=False):
        (wait,) = a.users
        last_read = max(order[u] for v in wait.users for u in v.users)
        assert order[b] > last_read


@pytest.mark.parametrize("bad", [0, -5, "big", 1.5])
def test_a_bad_offload_window_names_the_forms(bad):
    with pytest.raises(fxslots.OptionsError, match="offload_window"):
        fxslots.Options(offload_window=bad)
