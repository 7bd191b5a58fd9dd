"""The slot ring and the view builder, driven directly (no torch.compile)."""

from __future__ import annotations

import pytest
import torch

import fxslots
from fxslots.options import Options
from fxslots.runtime.layout import geometry_of, grouped_runs, make_views, view_runs
from fxslots.runtime.ring import SlotRing
from tests.test_graph_executor_cpu import stand_in_graphs  # noqa: F401


def test_make_views_equals_one_set_per_view_with_runs_grouped():
    arena = torch.arange(4096, dtype=torch.float32)
    st = arena.untyped_storage()
    geometry = [(torch.float32, 0, (2, 3), (3, 1)), (torch.float32, 16, (2, 3), (3, 1)),
                (torch.float32, 32, (2, 3), (3, 1)), (torch.float32, 40, (3, 2), (1, 3)),
                (torch.int64, 100, (4,), (1,)), (torch.float32, 48, (2, 3), (3, 1)),
                (torch.float32, 64, (2, 3), (3, 1)), (torch.float32, 64, (0, 3), (3, 1)),
                # equal shapes, but the third is not evenly spaced: it starts a run of its own
                (torch.float32, 80, (2, 3), (3, 1)), (torch.float32, 96, (2, 3), (3, 1)),
                (torch.float32, 120, (2, 3), (3, 1))]
    views = make_views(st, arena.device, geometry)
    for (dtype, off, shape, stride), v in zip(geometry, views, strict=True):
        ref = torch.empty(0, dtype=dtype).set_(st, off, shape, stride)
        assert (v.dtype, tuple(v.shape), v.stride(), v.storage_offset()) == \
            (dtype, shape, stride, off)
        assert torch.equal(v, ref)
        assert v.untyped_storage().data_ptr() == arena.data_ptr()
    assert [r[5] for r in view_runs(geometry)] == [3, 1, 1, 2, 1, 2, 1]


def test_ring_hands_out_free_slots_and_refuses_before_writing():
    ring = SlotRing("r", Options(slots=2))
    cpu = torch.device("cpu")
    s0, a0, _ = ring.acquire(1024, cpu, "v0")
    s1, a1, _ = ring.acquire(512, cpu, "v0")
    assert {s0.index, s1.index} == {0, 1} and ring.pending() == 2
    before = [s.arena.clone() for s in ring.slots]
    with pytest.raises(fxslots.SlotsExhaustedError,
                       match=r"all 2 are pending a backward .* raise the option 'slots' \(now 2\)"):
        ring.acquire(16, cpu, "v1")
    assert all(torch.equal(b, s.arena) for b, s in zip(before, ring.slots, strict=True))
    view = torch.empty(0).set_(a1, 0, (4,), (1,))
    assert ring.find(view) is s1
    ring.release(s1)
    assert ring.pending() == 1
    del a0  # the only view of that forward's alias: the slot frees itself
    assert ring.pending() == 0


def test_a_graph_without_parameters_counts_its_modules_as_one():
    """Found by review (session 46): a parameter-less module compiled on its own in each
    block runs one graph with no parameter set to tell the blocks apart; the refusal says so
    and what to do."""
    ring = SlotRing("r", Options(slots=1))
    held = ring.acquire(256, torch.device("cpu"), "v0")
    with pytest.raises(fxslots.SlotsExhaustedError, match="compile the block that holds it"):
        ring.acquire(256, torch.device("cpu"), "v0")
    other = ring.acquire(256, torch.device("cpu"), "v0", params=7)  # a set of its own
    with pytest.raises(fxslots.SlotsExhaustedError) as info:
        ring.acquire(256, torch.device("cpu"), "v0", params=7)
    assert "without parameters" not in str(info.value)
    del held, other


def test_slots_count_per_parameter_set():
    """One compiled graph serves every module of its class (``torch.compile`` per block):
    ``slots`` holds for each module's forwards. Another module's forward gets a new slot when
    the pending ones are not its own; its own ``slots`` pending still refuse."""
    ring = SlotRing("r", Options(slots=1))
    cpu = torch.device("cpu")
    held = [ring.acquire(256, cpu, "v0", params=p) for p in (1, 2, 3)]
    assert [s.index for s, _, _ in held] == [0, 1, 2] and ring.pending() == 3
    with pytest.raises(fxslots.SlotsExhaustedError, match="all 3 are pending"):
        ring.acquire(256, cpu, "v0", params=2)
    for s, _, _ in held:
        ring.release(s)
    del held
    again = [ring.acquire(256, cpu, "v0", params=p) for p in (1, 2, 3)]
    assert [s.index for s, _, _ in again] == [0, 1, 2] and len(ring.slots) == 3  # no more
    with pytest.raises(fxslots.FxslotsError, match="one compiled model keeps its slots on one"):
        ring.acquire(256, torch.device("meta"), "v0", params=4)  # a replica elsewhere: no slot
    assert len(ring.slots) == 3


def test_arena_grows_for_a_bigger_variant_and_respects_the_limit():
    ring = SlotRing("r", Options(slots=1, max_arena_bytes=4096))
    cpu = torch.device("cpu")
    slot, alias, _ = ring.acquire(1024, cpu, "v0")
    del alias
    slot, alias, _ = ring.acquire(2048, cpu, "v1")
    assert slot.nbytes == 2048 and slot.generation == 2 and ring.grow_events == 2
    del alias
    with pytest.raises(fxslots.ArenaLimitError, match="needs 8192 arena bytes .* max_arena_bytes=4096"):
        ring.acquire(8192, cpu, "v2")
    assert ring.pending() == 0 and slot.nbytes == 2048


def test_debug_release_poisons_the_arena():
    ring = SlotRing("r", Options(slots=1, debug=True))
    slot, alias, host = ring.acquire(64, torch.device("cpu"), "v0", host_nbytes=32)
    torch.empty(0).set_(alias, 0, (16,), (1,)).fill_(1.0)
    ring.release(slot)
    assert bool((slot.arena == 0xFF).all()) and bool((slot.host_arena == 0xFF).all())
    assert torch.isnan(slot.arena.view(torch.float32)).all()


def test_a_slot_stays_pending_while_views_of_its_host_arena_live():
    ring = SlotRing("r", Options(slots=1))
    slot, alias, host = ring.acquire(64, torch.device("cpu"), "v0", host_nbytes=128)
    assert slot.host_nbytes == 128
    offloaded = torch.empty(0).set_(host, 0, (8,), (1,))
    del alias, host
    assert ring.pending() == 1 and ring.find(offloaded) is slot
    with pytest.raises(fxslots.SlotsExhaustedError):
        ring.acquire(64, torch.device("cpu"), "v0")
    del offloaded
    assert ring.pending() == 0


class _Saves(torch.autograd.Function):
    """An autograd node that saves a tensor: what a forward's ``CompiledFunctionBackward`` is
    to its slot."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


@pytest.mark.parametrize("node_dies", [False, True])
def test_views_outliving_their_autograd_graph_keep_the_old_arenas_and_the_slot_takes_new(
        node_dies):
    """Views of a forward's aliases kept outside autograd (compiled autograd keeps the inputs
    of each backward it traces) after its autograd node let go of its saved tensors (its
    backward ran, or the node is gone): the next forward does not wait for them. They keep the
    old arenas, never written again, and the slot takes new ones. While the node holds its
    saved tensors the slot stays pending, and a slot whose node is unknown keeps the old rule."""
    import weakref

    ring = SlotRing("r", Options(slots=1))
    cpu = torch.device("cpu")
    slot, alias, host = ring.acquire(64, cpu, "v0", host_nbytes=32)
    kept = [torch.empty(0).set_(a, 0, (4,), (1,)).fill_(3.0) for a in (alias, host)]
    del alias, host
    with pytest.raises(fxslots.SlotsExhaustedError):  # no node known: pending while viewed
        ring.acquire(64, cpu, "v0")
    x = torch.ones(2, requires_grad=True)
    y = _Saves.apply(x)
    slot.node = weakref.ref(y.grad_fn)
    with pytest.raises(fxslots.SlotsExhaustedError):  # the node still holds what it saved
        ring.acquire(64, cpu, "v0")
    y.sum().backward(retain_graph=True)
    with pytest.raises(fxslots.SlotsExhaustedError):  # retained: a second backward may come
        ring.acquire(64, cpu, "v0")
    y.sum().backward()
    if node_dies:
        del y
    old, generation = (weakref.ref(slot.arena), weakref.ref(slot.host_arena)), slot.generation
    again, alias, host = ring.acquire(64, cpu, "v0", host_nbytes=32)
    assert again is slot and ring.orphans == 1 and slot.generation > generation  # graphs stale
    assert slot.node is None  # the new holder's (none given), never the old one's
    assert old[0]() is not None and old[1]() is not None  # alive while the views live
    assert slot.arena is not old[0]() and slot.host_arena is not old[1]()
    slot.arena.fill_(0)
    slot.host_arena.fill_(0)
    assert all(torch.equal(k, torch.full((4,), 3.0)) for k in kept)
    del kept, alias, host  # (the new holder's node is its own: never the old one's)
    ring.acquire(16, cpu, "v0")  # let go at the next forward
    assert old[0]() is None and old[1]() is None


def test_a_backward_gives_back_only_the_slot_its_microbatch_still_holds():
    """A slot taken from its microbatch (``_disown``: its node let go of its saved tensors)
    holds another microbatch's activations: the first one's backward, ending, must not give it
    back, or the next forward writes over them (found by a review, with threads)."""
    import weakref

    ring = SlotRing("r", Options(slots=1))
    cpu = torch.device("cpu")
    x = torch.ones(2, requires_grad=True)
    y = _Saves.apply(x)
    slot, first, _ = ring.acquire(64, cpu, "v0", node=weakref.ref(y.grad_fn))
    saved_first = torch.empty(0, dtype=torch.uint8).set_(first)
    y.sum().backward()  # its node let go: the slot looks orphaned
    again, second, _ = ring.acquire(64, cpu, "v0")
    assert again is slot and ring.orphans == 1
    ring.release(slot, saved_first)  # the first microbatch's backward ends
    assert slot.pending()
    with pytest.raises(fxslots.SlotsExhaustedError):
        ring.acquire(64, cpu, "v0")
    ring.release(slot, torch.empty(0, dtype=torch.uint8).set_(second))
    assert not slot.pending()


def _arenas() -> list:
    import weakref

    return [weakref.ref(a) for g in fxslots.regions() for s in g.ring.slots
            for a in (s.arena, s.host_arena) if a is not None]


def _train(model, slots=2, **options):
    c = torch.compile(model, backend="fxslots", options={"slots": slots, **options})
    outs = [c(torch.randn(4, 16)) for _ in range(slots)]
    for o in outs:
        o.sum().backward()
    return c


@pytest.mark.parametrize("options", [{}, {"offload": "all"}], ids=["device", "host-too"])
def test_deleting_the_model_frees_its_arenas(options):
    import gc

    from examples.models import MLP

    model = MLP()
    c = _train(model, **options)
    arenas = _arenas()
    assert len(arenas) >= 2 and all(a() is not None for a in arenas)
    del model, c
    gc.collect()
    assert [a() for a in arenas] == [None] * len(arenas)


def test_a_pending_slot_keeps_its_arena_until_its_backward():
    import gc

    from examples.models import MLP

    model = MLP()
    c = torch.compile(model, backend="fxslots", options={"slots": 1})
    out = c(torch.randn(4, 16))
    arenas = _arenas()
    del model, c
    gc.collect()
    assert all(a() is not None for a in arenas)  # the microbatch in flight still reads it
    out.sum().backward()
    del out
    fxslots.reset()
    assert [a() for a in arenas] == [None] * len(arenas)


@pytest.mark.parametrize("reset", ["fxslots", "torch"])
def test_reset_frees_every_arena_while_the_model_lives(reset):
    import gc

    from examples.models import MLP

    model = MLP()
    c = _train(model)
    arenas = _arenas()
    assert arenas
    if reset == "fxslots":
        fxslots.reset()
    else:
        torch.compiler.reset()
    gc.collect()
    assert [a() for a in arenas] == [None] * len(arenas)
    assert not fxslots.regions()
    del c
    _train(model)  # and the model compiles and trains again


class _ReturnsSaved(torch.autograd.Function):
    """Its input's gradient is a tensor it saved: the backward returns a value in the slot."""

    @staticmethod
    def forward(ctx, x, w):
        z = torch.tanh(x @ w)
        ctx.save_for_backward(z, x)
        return z * 2

    @staticmethod
    def backward(ctx, g):
        z, x = ctx.saved_tensors
        return z, x.t() @ (g * (1 - z * z) * 2)


class _UsesReturnsSaved(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, 16))
        self.v = torch.nn.Parameter(torch.randn(16, 16))

    def forward(self, x):
        return torch.sin(_ReturnsSaved.apply(x, self.w) @ self.v)


@pytest.mark.parametrize("graphs", [False, True], ids=["eager-executor", "graph-executor"])
def test_a_gradient_that_is_a_saved_tensor_outlives_the_slot(graphs, request):
    """x.grad kept across steps, where the backward returns a saved tensor as x's gradient:
    the next forward reuses the slot, and the kept gradient must not change with it."""
    if graphs:
        request.getfixturevalue("stand_in_graphs")
    torch.manual_seed(0)
    m, e = _UsesReturnsSaved(), _UsesReturnsSaved()
    e.load_state_dict(m.state_dict())
    c = torch.compile(m, backend="fxslots", options={"slots": 1})
    held = []
    for _ in range(4):
        x = torch.randn(8, 16, requires_grad=True)
        xe = x.detach().clone().requires_grad_()
        c(x).sum().backward()
        e(xe).sum().backward()
        held.append((x.grad, xe.grad))
    for step, (got, want) in enumerate(held):
        assert torch.equal(got, want), step


def test_foreach_copy_copies_large_tensors_alone_and_exactly(monkeypatch):
    """Tensors of ``FOREACH_MAX_BYTES`` or more are copied with a copy_ each, the rest in one
    multi-tensor copy; every destination ends equal to its source either way."""
    from fxslots import _torch

    monkeypatch.setattr(_torch, "FOREACH_MAX_BYTES", 64)
    calls = []
    real = torch._foreach_copy_
    monkeypatch.setattr(torch, "_foreach_copy_", lambda d, s: (calls.append(len(d)), real(d, s)))
    src = [torch.randn(n) for n in (4, 40, 8, 16)]  # 16, 160, 32, 64 bytes
    dst = [torch.empty_like(s) for s in src]
    _torch.foreach_copy_(dst, src)
    assert calls == [2]
    assert all(torch.equal(d, s) for d, s in zip(dst, src, strict=True))


def test_each_variant_in_flight_keeps_to_a_slot_of_its_size():
    """Four variants in flight, step after step (FFFFBBBB): best fit gives each the slot it
    grew, so the arenas hold the four sizes, not four times the largest, and no slot grows
    after the first step."""
    ring = SlotRing("r", Options(slots=4))
    cpu = torch.device("cpu")
    sizes = [512, 1024, 1536, 2048]
    for step in range(3):
        held = [ring.acquire(n, cpu, f"v{n}") for n in sizes]
        assert [s.nbytes for s, _, _ in held] == sizes
        if step == 0:
            grown = ring.grow_events
        for s, _, _ in held:
            ring.release(s)
        del held
    assert sorted(s.nbytes for s in ring.slots) == sizes and ring.grow_events == grown
    slot, alias, _ = ring.acquire(4096, cpu, "v4096")  # none fits: the largest grows
    assert slot.nbytes == 4096 and sorted(s.nbytes for s in ring.slots) == [512, 1024, 1536,
                                                                            4096]


def test_grouped_runs_make_few_views_and_keep_each_index_its_own():
    """Views handed out after each replay are grouped by dtype, shape and stride in offset
    order (a backward's gradients in the arena's freed holes step down and jump): four 2x2
    views at descending and shuffled offsets make one run, and each index still gets the view
    of its own geometry."""
    f32, f16 = torch.float32, torch.float16
    geometry = [(f32, off, (2, 2), (2, 1)) for off in (8, 4, 0, 12)] + [(f16, 2, (3,), (1,))]
    idx, runs = grouped_runs([10, 11, 12, 13, 14], geometry)
    assert idx == [14, 12, 11, 10, 13]
    assert runs == ((f16, 2, (3,), (1,), 0, 1), (f32, 0, (2, 2), (2, 1), 4, 4))
    alias = torch.empty(64, dtype=torch.uint8).untyped_storage()
    made = dict(zip(idx, make_views(alias, torch.device("cpu"), None, runs), strict=True))
    for j, g in zip([10, 11, 12, 13, 14], geometry, strict=True):
        assert geometry_of(made[j]) == g


def test_collapse_leaves_out_all_but_one_saved_tensor_per_arena():
    """runtime.collapse, hand-built: outputs 1-3 in the device arena, 5-6 in the host arena,
    output 4 a parameter; the backward takes them at 0-2, 4-5 and 3, then two tangents. The
    backward's shorter list gets each arena's token back at every place; its full list passes
    as it is."""
    from fxslots.runtime.collapse import plan_collapse

    c = plan_collapse([[(2, 1), (1, 0), (3, 2)], [(5, 4), (6, 5)]], {5, 6}, 8, fixed=0)
    assert c.dropped == {2, 3, 6} and c.short == 5
    assert c.backward_args(["t", "p", "h", "g1", "g2"]) == ["t", "t", "t", "p", "h", "h", "g1",
                                                             "g2"]
    full = list("abcdefgh")
    assert c.backward_args(full) is full
    with pytest.raises(fxslots.FxslotsError, match="takes 8 .5 when"):  # never shifted args
        c.backward_args(full[:7])
    # nothing to leave out; an output AOTAutograd reads by position; orders that differ
    assert plan_collapse([[(1, 0)], []], set(), 3, fixed=0) is None
    assert plan_collapse([[(1, 0), (2, 1)]], set(), 3, fixed=2) is None
    assert plan_collapse([[(1, 1), (2, 0)]], set(), 3, fixed=0) is None


def test_a_parameter_set_is_noted_again_when_its_key_names_new_parameters():
    """A set is known by its first and last parameter's ids, which new parameters can reuse
    once the old ones died (a new model after an old one): the new parameters are noted
    (``state.accumulators``, read by the check for parameters two regions feed), not taken
    for the dead set's."""
    from fxslots import state
    from fxslots.runtime.region import Region

    region = Region.new("r", Options())
    old, new = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))
    key = (id(old), id(old))  # the ids ``new`` would have, had it reused ``old``'s
    region.note_parameters([old], (0,), key)
    region.note_parameters([new], (0,), key)
    ref, regions = state.accumulators[id(new)]
    assert ref() is new and id(region) in regions
