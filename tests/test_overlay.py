"""Gradients written into saved bytes of the slot's arena that the backward has finished
reading (fxslots.overlay): the planner on hand-built spans, the lifetimes analysis on a traced
backward, then the executor on CPU with the stand-in graph, bitwise against eager, through
the loops that must not use it (accumulation, retain_graph) and one that changes its mind."""

from __future__ import annotations

import copy
import gc
import re

import weakref

import pytest
import torch
from expecttest import assert_expected_inline
from torch import nn

import fxslots
from fxslots import state
from examples.models import MLP
from fxslots.overlay import END, NEVER, Span, place, spans_of
from fxslots.passes.deliver import deliver_outputs, deliverable
from fxslots.passes.lifetimes import read_lifetimes
from tests.helpers import report_part, schedule_1f1b, schedule_ffbb
from tests.test_deliver import _backward_graph
from tests.test_graph_executor_cpu import _StandInGraph, stand_in_graphs  # noqa: F401

# ----------------------------------------------------------------------------- the planner


def test_a_gradient_takes_bytes_read_before_it_is_written_and_no_others():
    spans = [Span(0, 1024, last_read=5), Span(1024, 2048, last_read=9)]
    # written at 6: only the first span is done; written at 5: its last reader is that node
    assert place(spans, 2048, [(512, 6)], 256) == (0,)
    assert place(spans, 2048, [(512, 5)], 256) == (None,)
    assert place(spans, 2048, [(512, 10)], 256) == (0,)  # both done: one hole


def test_gradients_never_share_bytes_and_stay_aligned():
    spans = [Span(0, 4096, last_read=1)]
    got = place(spans, 4096, [(1000, 2), (1000, 3), (1000, 4), (1000, 5)], 512)
    assert got == (0, 1024, 2048, 3072)
    assert all(o % 512 == 0 for o in got)
    # A fifth of 1000 bytes no longer fits: it goes to the output buffer (None)
    assert place(spans, 4096, [(1000, 2)] * 5, 512)[-1] is None


def test_bytes_outside_every_span_are_free_from_the_start():
    # The arena is sized by the largest variant: past this variant's spans, nothing is read.
    spans = [Span(0, 1024, last_read=END)]
    assert place(spans, 4096, [(2048, 0)], 512) == (1024,)
    # A group no backward node reads (spans_of leaves it out) is free too.
    assert spans_of([(0, 1024, 7), (1024, 1024, 8)], {7: NEVER, 8: 3}) == [Span(1024, 2048, 3, 8)]


def test_the_smallest_hole_that_fits_keeps_large_holes_for_large_gradients():
    spans = [Span(0, 512, 1), Span(512, 1024, END), Span(1024, 4096, 1)]
    # the small gradient (written first) takes the small hole; the large one still fits after
    assert place(spans, 4096, [(512, 2), (3072, 3)], 512) == (0, 1024)


# ----------------------------------------------------------------------------- lifetimes


def test_lifetimes_follow_views_and_name_the_node_that_writes_each_gradient():
    bw, _ = _backward_graph()
    outputs = deliverable(bw, torch.device("cpu"), range(6))
    gm, _ = deliver_outputs(bw, outputs, None)
    reads, writes = read_lifetimes(gm, len(outputs))
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    assert len(reads) == len(placeholders) - len(outputs)
    for p, at in zip(placeholders, reads, strict=False):
        readers = [nodes.index(u) for u in p.users]
        if not readers:
            assert at == NEVER, p.name
        elif any(u.op == "output" for u in p.users):
            assert at == END, p.name
        else:  # a view's readers count: never earlier than the direct ones
            assert at >= max(readers), p.name
    for buf, at in zip(placeholders[-len(outputs):], writes, strict=True):
        assert nodes[at] in buf.users and all(nodes.index(u) >= at for u in buf.users)


def test_a_view_read_later_keeps_its_base_alive_and_a_returned_value_lives_to_the_end():
    aten = torch.ops.aten
    g = torch.fx.Graph()
    a, b, r, buf = (g.placeholder(n) for n in ("a", "b", "r", "buf"))
    at = g.call_function(aten.t.default, (a,))  # 4: a view of a, read only at 6
    two = g.call_function(aten.mul.Tensor, (b, 2))  # 5: b's last read
    mm = g.call_function(aten.mm.default, (at, two))  # 6
    g.call_function(aten.copy_.default, (buf, mm))  # 7: the gradient's write
    g.output((mm, r))  # r is handed out: read at the end
    reads, writes = read_lifetimes(torch.fx.GraphModule(nn.Module(), g), 1)
    assert reads == (6, 5, END) and writes == (7,)


def test_a_collective_reads_its_input_until_what_waits_for_it_is_done():
    """A functional collective reads its input on another stream until wait_tensor, which
    takes only the collective's output: the input is read as long as anything downstream."""
    c10d, aten = torch.ops._c10d_functional, torch.ops.aten
    g = torch.fx.Graph()
    a, b, buf = (g.placeholder(n) for n in ("a", "b", "buf"))
    gathered = g.call_function(c10d.all_gather_into_tensor.default, (a, 2, "0"))  # 3
    waited = g.call_function(c10d.wait_tensor.default, (gathered,))  # 4
    total = g.call_function(aten.sum.default, (waited,))  # 5
    g.call_function(aten.copy_.default, (buf, total))  # 6
    g.output((b,))
    reads, _ = read_lifetimes(torch.fx.GraphModule(nn.Module(), g), 1)
    assert reads[0] == 6, reads


# ----------------------------------------------------------------------------- the runtime


def _arena_of(region):
    (slot,) = region.ring.slots
    return slot, slot.arena.data_ptr(), slot.arena.data_ptr() + slot.arena.numel()


def _in(lo, hi, t):
    return lo <= t.data_ptr() < hi


def _both(c, e, x):
    """One forward and backward of the compiled model ``c`` and of ``e`` (eager) on ``x``."""
    c(x).sum().backward()
    e(x).sum().backward()


def _same_grads(m, e, step=None):
    for p, q in zip(m.parameters(), e.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad), step


def _drop(*models):
    for model in models:
        model.zero_grad(set_to_none=True)


def _pair(seed=0, d=64, layers=6):
    torch.manual_seed(seed)
    m, e = MLP(d, d, layers), MLP(d, d, layers)
    e.load_state_dict(m.state_dict())
    return m, e


def _compiled(m, e, kernels):
    """``m`` compiled by fxslots (one slot) with ``kernels``, and what its gradients match
    bitwise: ``e`` itself under ATen kernels, ``torch.compile(e)`` under Inductor's
    (tests/test_fence.py has the rest of Inductor's case)."""
    c = torch.compile(m, backend="fxslots", options={"slots": 1, "kernels": kernels})
    return c, (e if kernels == "aten" else torch.compile(e))


KERNELS = pytest.mark.parametrize("kernels", ["aten", "inductor"])


def test_a_loop_that_drops_gradients_gets_them_in_the_arena_bitwise(stand_in_graphs):  # noqa
    m, e = _pair()
    c = torch.compile(m, backend="fxslots", options={"slots": 1})
    placed = []
    for step in range(6):
        x = torch.randn(256, 64)
        _both(c, e, x)
        _same_grads(m, e, step)
        (region,) = fxslots.regions()
        slot, lo, hi = _arena_of(region)
        placed.append([_in(lo, hi, p.grad) for p in m.parameters()])
        rest = sum(p.grad.nbytes for p in m.parameters() if not _in(lo, hi, p.grad))
        if any(placed[-1]):
            assert slot.lent_out()
            spans = sorted((p.grad.data_ptr(), p.grad.data_ptr() + p.grad.nbytes)
                           for p in m.parameters() if _in(lo, hi, p.grad))
            assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), "gradients overlap"
        _drop(m, e)
    # The warm-up (the plain backward) shows the loop drops gradients; from the next step on,
    # all but the first written (the last layer's, before anything was done being read) go
    # into the arena, and the output buffer holds only those.
    assert not any(placed[0])
    assert sum(placed[-1]) >= len(placed[-1]) - 2, placed[-1]
    assert placed[1:] == [placed[-1]] * 5  # the same place every step: graphs replay
    assert region.ring.evictions == 0 and _StandInGraph.replays > 0
    (full,), (buffer,) = region.outputs.values(), region.placed_outputs.values()
    assert full.tensor is None and buffer.tensor.numel() <= rest + 512
    assert fxslots.counters["grad_bytes_in_arena"] > 0


@KERNELS
def test_a_loop_that_accumulates_never_puts_gradients_in_the_arena(stand_in_graphs,  # noqa
                                                                    kernels):
    m, e = _pair()
    c, ref = _compiled(m, e, kernels)
    for step in range(4):
        for _ in range(2):  # two microbatches, one .grad
            x = torch.randn(256, 64)
            _both(c, ref, x)
        _same_grads(m, e, step)
        _drop(m, e)
    (region,) = fxslots.regions()
    assert region.grads_kept and not region.grads_in_arena()
    assert fxslots.counters["grad_bytes_in_arena"] == 0


@KERNELS
def test_gradients_kept_past_the_next_forward_move_the_arena_not_the_gradients(
        stand_in_graphs, kernels):  # noqa: F811
    """The loop drops gradients for three steps, then keeps one step's past the next forward:
    that forward takes a new arena (the old one stays the gradients'), which keep their
    values; from then on gradients get a buffer of their own."""
    m, e = _pair()
    c, ref = _compiled(m, e, kernels)
    for _ in range(3):
        x = torch.randn(256, 64)
        _both(c, ref, x)
        _drop(m, e)
    x = torch.randn(256, 64)
    _both(c, ref, x)
    (region,) = fxslots.regions()
    slot, lo, hi = _arena_of(region)
    kept = [p.grad for p in m.parameters()]
    values = [g.clone() for g in kept]
    assert any(_in(lo, hi, g) for g in kept)
    for _ in range(3):  # more microbatches into the same .grad: they now add into it
        x = torch.randn(256, 64)
        _both(c, ref, x)
    assert region.ring.evictions == 1 and not region.grads_in_arena()
    _same_grads(m, e)
    # The gradients stayed where they were (the old arena, kept for them while they live).
    assert [g.data_ptr() for g in kept] == [p.grad.data_ptr() for p in m.parameters()]
    (old,) = [weakref.ref(mem) for mem, _ in state.viewed if mem.data_ptr() == lo]
    assert not any(_in(*_arena_of(region)[1:], g) for g in kept)
    del kept, values
    _drop(m, e)
    c(torch.randn(256, 64)).sum().backward()  # the next forward lets the old arena go
    # by identity: a buffer allocated since may take the freed address (it did, under xdist)
    assert not any(mem is old() for mem, _ in state.viewed)


def test_an_eviction_out_of_memory_names_grads_in_arena(stand_in_graphs, monkeypatch):  # noqa
    """The new arena an eviction needs (the old one holds kept gradients) does not fit: the
    error says why and names the option that avoids it, before the forward writes anything."""
    m, e = _pair()
    c = torch.compile(m, backend="fxslots", options={"slots": 1})
    for _ in range(3):
        _both(c, e, torch.randn(256, 64))
        _drop(m, e)
    _both(c, e, torch.randn(256, 64))
    real_empty = torch.empty

    def no_arena(*args, **kwargs):  # an arena is a flat uint8 tensor on the slot's device
        if kwargs.get("dtype") is torch.uint8 and "device" in kwargs:
            raise torch.OutOfMemoryError("out of memory (test)")
        return real_empty(*args, **kwargs)

    monkeypatch.setattr(torch, "empty", no_arena)
    with pytest.raises(fxslots.ArenaLimitError, match="kept.*'grads_in_arena': False"):
        c(torch.randn(256, 64))


def test_gradients_held_across_reset_keep_their_values(stand_in_graphs):  # noqa: F811
    """fxslots.reset() frees the regions; memory a held .grad views (the arena, the output
    buffer) stays until the gradient dies (review of run 20's change: it was freed)."""
    m, e = _pair()
    c = torch.compile(m, backend="fxslots", options={"slots": 1})
    for _ in range(4):
        x = torch.randn(256, 64)
        _drop(m, e)
        _both(c, e, x)
    assert fxslots.counters["grad_bytes_in_arena"] > 0
    fxslots.reset()
    torch._dynamo.reset()
    gc.collect()
    scribble = [torch.full((1 << 16,), 7.0) for _ in range(64)]  # reuse freed memory, if any
    _same_grads(m, e)
    del scribble


def test_prepare_tells_nothing_about_the_loop_that_follows(stand_in_graphs):  # noqa: F811
    """fxslots.prepare drops gradients itself: an accumulating loop after it never evicts."""
    m, e = _pair()
    c = torch.compile(m, backend="fxslots", options={"slots": 1})
    fxslots.prepare(c, [torch.randn(256, 64)])
    (region,) = fxslots.regions()
    assert not (region.grads_kept or region.grads_dropped)
    for step in range(3):
        for _ in range(2):
            x = torch.randn(256, 64)
            _both(c, e, x)
        _same_grads(m, e, step)
        _drop(m, e)
    assert region.grads_kept and region.ring.evictions == 0


def test_after_prepare_a_loop_that_drops_gradients_captures_nothing(stand_in_graphs):  # noqa
    m, e = _pair()
    c = torch.compile(m, backend="fxslots", options={"slots": 1})
    fxslots.prepare(c, [torch.randn(256, 64)])
    captures = fxslots.counters["captures"]
    for step in range(4):
        x = torch.randn(256, 64)
        _both(c, e, x)
        _same_grads(m, e, step)
        _drop(m, e)
    (region,) = fxslots.regions()
    assert region.grads_in_arena() and fxslots.counters["grad_bytes_in_arena"] > 0
    assert fxslots.counters["captures"] == captures


def test_the_buffer_a_loop_no_longer_needs_is_freed_once_and_its_graphs_forgotten():
    """``Region.release_outputs`` by hand: the full output buffer goes once a backward places
    gradients (not inside prepare, which captures both kinds), and stays once an unplaced
    backward needed it after that (freed again, it would grow and capture in turn); the
    placed one goes once the loop is seen keeping gradients."""
    from types import SimpleNamespace as NS

    from fxslots.options import Options
    from fxslots.runtime.region import Region

    region, cpu = Region.new("r", Options()), torch.device("cpu")
    full, rest = region.outputs_for(0), region.outputs_for(0, placed=True)
    dropped = []

    def release(placed):
        """The generations whose graphs this call forgot, among the buffers' so far."""
        dropped.clear()
        region.release_outputs(0, placed, dropped.append)
        return {g for g in seen if any(d(NS(delivers=g, tangents_in=-1)) for d in dropped)}

    full.ensure(4096, cpu)  # the warm-up's
    seen = {full.generation}
    assert release(False) == set() and full.tensor is not None
    state.preparing += 1
    try:
        assert release(True) == set() and full.tensor is not None
    finally:
        state.preparing -= 1
    rest.ensure(512, cpu)
    seen |= {rest.generation}
    assert release(True) == {full.generation} and full.tensor is None
    full.ensure(4096, cpu)  # a layout where no gradient fits grows it again
    seen |= {full.generation}
    assert release(False) == set() and release(True) == set()
    assert full.tensor is not None and rest.tensor is not None
    region.grads_kept = True
    assert release(False) == {rest.generation}
    assert rest.tensor is None and full.tensor is not None


def test_a_loop_seen_keeping_gradients_stops_before_it_must_evict(stand_in_graphs):  # noqa
    """FFBB steps show a loop that drops gradients; then a 1F1B step runs a forward while the
    first backward's gradients live: the region stops putting them in arenas there, and that
    forward takes a spare slot (three slots), not the lent one: nothing is evicted."""
    m, e = _pair()
    c = torch.compile(m, backend="fxslots", options={"slots": 3})
    for sched in (schedule_ffbb(2), schedule_ffbb(2), schedule_1f1b(4, 2), schedule_ffbb(2)):
        xs = [torch.randn(256, 64) for _ in range(4)]
        for model in (c, e):
            pending = {}
            for op, i in sched:
                if op == "F":
                    pending[i] = model(xs[i])
                else:
                    pending.pop(i).sum().backward()
        _same_grads(m, e)
        _drop(m, e)
    (region,) = fxslots.regions()
    assert region.grads_dropped and region.grads_kept and not region.grads_in_arena()
    assert region.ring.evictions == 0 and fxslots.counters["grad_bytes_in_arena"] > 0


@KERNELS
def test_retain_graph_keeps_the_saved_bytes_it_reads_again(stand_in_graphs,  # noqa: F811
                                                           kernels):
    # torch.compile's own backward refuses retain_graph=True over buffers it donates. The
    # config's own patch, not monkeypatch: on torch 2.14 monkeypatch's undo deletes the key
    # (a config module hides a deleted key), which broke every later compile in the process.
    with torch._functorch.config.patch(donated_buffer=False):
        _retain_graph_twice(kernels)


def _retain_graph_twice(kernels):
    m, e = _pair()
    c, ref = _compiled(m, e, kernels)
    for step in range(5):
        x = torch.randn(256, 64)
        out, want = c(x).sum(), ref(x).sum()
        out.backward(retain_graph=step == 4)
        want.backward(retain_graph=step == 4)
        if step == 4:  # the second backward reads the same saved tensors
            _drop(m, e)
            out.backward()
            want.backward()
        _same_grads(m, e, step)
        _drop(m, e)


def test_debug_poisoning_spares_the_gradients_in_a_released_arena(stand_in_graphs):  # noqa
    m, e = _pair()
    c = torch.compile(m, backend="fxslots", options={"slots": 1, "debug": True})
    for step in range(5):
        x = torch.randn(256, 64)
        _both(c, e, x)
        _same_grads(m, e, step)
        _drop(m, e)
    (region,) = fxslots.regions()
    assert fxslots.counters["grad_bytes_in_arena"] > 0


def test_the_option_off_keeps_gradients_out_of_the_arena(stand_in_graphs):  # noqa: F811
    m, _ = _pair()
    c = torch.compile(m, backend="fxslots", options={"slots": 1, "grads_in_arena": False})
    for _ in range(4):
        c(torch.randn(256, 64)).sum().backward()
        _drop(m)
    assert fxslots.counters["grad_bytes_in_arena"] == 0


def test_a_conv_net_with_batch_norm_bitwise(stand_in_graphs):  # noqa: F811
    """Multi-output backward ops (batch norm's) and convolution weight gradients."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                      nn.Conv2d(8, 8, 3, padding=1), nn.Flatten(), nn.Linear(8 * 64, 4))
    e = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                      nn.Conv2d(8, 8, 3, padding=1), nn.Flatten(), nn.Linear(8 * 64, 4))
    e.load_state_dict(m.state_dict())
    c = torch.compile(m, backend="fxslots", options={"slots": 1})
    for step in range(5):
        x = torch.randn(16, 3, 8, 8)
        c(x).square().mean().backward()
        e(x).square().mean().backward()
        _same_grads(m, e, step)
        _drop(m, e)
    assert fxslots.counters["grad_bytes_in_arena"] > 0


# ----------------------------------------------------------------------------- CUDA


@pytest.mark.cuda
def test_cuda_gradients_in_the_arena_match_eager_and_survive_the_next_step():
    """Real CUDA graphs: gradients land in the slot's arena, match eager's, and stay what they
    were until the loop drops them; a loop that then keeps them past a forward moves the arena."""
    torch.manual_seed(0)
    m, e = MLP(256, 256, 6).cuda(), MLP(256, 256, 6).cuda()
    e.load_state_dict(m.state_dict())
    c = torch.compile(m, backend="fxslots", options={"slots": 1})
    for step in range(6):
        x = torch.randn(512, 256, device="cuda")
        _both(c, e, x)
        for p, q in zip(m.parameters(), e.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
        _drop(m, e)
    (region,) = fxslots.regions()
    slot, lo, hi = _arena_of(region)
    assert fxslots.counters["grad_bytes_in_arena"] > 0  # FXSLOTS_KERNELS=inductor: fenced
    x = torch.randn(512, 256, device="cuda")
    _both(c, e, x)
    kept = [(p.grad, p.grad.clone()) for p in m.parameters() if _in(lo, hi, p.grad)]
    assert kept
    for _ in range(2):  # accumulate from now on: the next forward needs a new arena
        x = torch.randn(512, 256, device="cuda")
        _both(c, e, x)
    torch.cuda.synchronize()
    for p, q in zip(m.parameters(), e.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    assert region.ring.evictions == 1


# ----------------------------------------------------------------------------- golden


def test_golden_explain_shows_each_gradient_over_the_bytes_it_reuses(stand_in_graphs):  # noqa
    """The table explain() prints, pinned; then the runtime: bitwise against eager, and every
    gradient at the arena offset the table names (or outside the arena: the output buffer)."""
    torch.manual_seed(0)
    model, x = MLP(16, 16, 3), torch.randn(64, 16)
    text = str(fxslots.explain(model, x))
    table = report_part(text, "----- gradients in the arena")
    assert_expected_inline(table, """\
----- gradients in the arena at its one shape (once the loop drops .grad before each forward) -----
gradient  bytes  written by  goes to               over
--------  -----  ----------  --------------------  ----------------------
output 0  1024   mm_4        arena [14336, 15360)  g5 (read last by mm_1)
output 1  64     sum_3       arena [15360, 15424)  g5 (read last by mm_1)
output 3  1024   mm_3        arena [12800, 13824)  g5 (read last by mm_1)
output 4  64     sum_2       arena [13824, 13888)  g5 (read last by mm_1)
output 5  1024   mm_1        output buffer         -
output 6  64     sum_1       arena [12288, 12352)  g5 (read last by mm_1)
in the arena: 2240 of 3264 gradient bytes (arena 20480 bytes)""")
    want = {int(m[1]): (int(m[2]) if m[2] else None) for m in re.finditer(
        r"^output (\d+) +\d+ +\w+ +(?:arena \[(\d+), \d+\)|output buffer)", table, re.M)}
    _drop(model)  # explain ran a backward
    fxslots.reset()
    e = copy.deepcopy(model)
    c = torch.compile(model, backend="fxslots", options={"slots": 1})
    for step in range(3):
        _both(c, e, x)
        _same_grads(model, e, step)
        (region,) = fxslots.regions()
        slot, lo, hi = _arena_of(region)
        params = list(model.parameters())
        got = {i: (params[k].grad.data_ptr() - lo if _in(lo, hi, params[k].grad) else None)
               for k, i in enumerate((0, 1, 3, 4, 5, 6))}
        if step:  # the first step is the warm-up: the plain backward
            assert got == want, (step, got)
        _drop(model, e)


@KERNELS
def test_shape_buckets_share_the_output_buffers_without_capturing_in_turn(stand_in_graphs,  # noqa
                                                                          kernels):
    """Variants of one region share its output buffers (``Region.release_outputs``): a batch
    of 2 trains alone first (its arena has room for the biases' gradients only), then batches
    of 256 (the arena grows; nearly every gradient fits) alternate with it. The full buffer
    is freed and stays freed, the placed one holds what the batch of 2 places least, nothing
    captures again once both shapes ran in the grown arena, and gradients stay bitwise."""
    m, e = _pair()
    c = torch.compile(m, backend="fxslots", options={"slots": 1, "kernels": kernels},
                      dynamic=False)
    ref = e if kernels == "aten" else torch.compile(e, dynamic=False)
    captures = []
    for step in range(10):
        x = torch.randn(256 if step >= 3 and step % 2 else 2, 64)
        c(x).sum().backward()
        ref(x).sum().backward()
        _same_grads(m, e, step)
        _drop(m, e)
        captures.append(fxslots.counters["captures"])
    (region,) = fxslots.regions()
    (full,), (rest,) = region.outputs.values(), region.placed_outputs.values()
    assert full.tensor is None and 0 < rest.tensor.numel() < sum(
        p.numel() * p.element_size() for p in m.parameters())
    assert captures[-1] == captures[-3] > captures[2], captures
