"""The planner is a pure function of hand-built saved tensors: no graph, no torch.compile."""

from __future__ import annotations

import pytest
import sympy
import torch

from fxslots.passes.plan import plan_arena, unplaceable_reason
from fxslots.schemas import (
    Root, SavedSet, SavedTensor, Source, StorageGroup, Write, align_up, evaluate,
)

I = sympy.Integer
s0 = sympy.Symbol("s0", integer=True, positive=True)


def tensor(name, shape, stride=None, offset=0, group=0, dtype=torch.float32, dense=True,
           overlapping=False):
    shape = tuple(sympy.sympify(x) for x in shape)
    if stride is None:
        stride, acc = [], I(1)
        for s in reversed(shape):
            stride.insert(0, acc)
            acc = acc * s
    return SavedTensor(name, shape, tuple(sympy.sympify(x) for x in stride), sympy.sympify(offset),
                       dtype, "cpu", group, dense, overlapping)


def group(gid, members, source=Source.INTERMEDIATE, root=None, user_visible=False):
    start = min(m.storage_offset * m.itemsize for m in members)
    end = max(m.storage_offset * m.itemsize + m.nbytes for m in members)
    return StorageGroup(gid, source, tuple(m.name for m in members), sympy.sympify(start),
                        sympy.simplify(end - start), root, user_visible)


def root(name, shape, out="aten::mm.out"):
    t = tensor(name, shape)
    return Root(name, t.shape, t.stride, torch.float32, out, None if out else "no out= form")


def test_groups_are_packed_end_to_end_and_aligned():
    a, b = tensor("a", [4, 8], group=0), tensor("b", [3], group=1)
    saved = SavedSet((a, b), (group(0, [a], root=root("a", [4, 8])),
                              group(1, [b], root=root("b", [3], out=None))))
    plan = plan_arena(saved, alignment=64)
    pa, pb = plan.placements
    assert (pa.write, pa.offset, pa.nbytes) == (Write.OUT, 0, 128)
    assert (pb.write, pb.offset, pb.nbytes) == (Write.COPY, 128, 12)
    assert plan.capacity == 192 and plan.copied_bytes == 12
    assert [v.name for v in plan.views] == ["slot_a", "slot_b"]
    assert plan.views[1].storage_offset == 128 // 4  # elements, from the arena's first byte


def test_views_of_one_storage_share_one_placement():
    base = tensor("base", [4, 8])
    t = tensor("t", [8, 4], stride=[1, 8])
    tail = tensor("tail", [2, 8], offset=16)
    exp = tensor("exp", [4, 8], stride=[0, 1], dense=False)
    members = [base, t, tail, exp]
    saved = SavedSet(tuple(members), (group(0, members, root=root("base", [4, 8])),))
    plan = plan_arena(saved)
    (p,) = plan.placements
    assert p.write is Write.OUT and p.nbytes == 128
    # Copy-free: only the root is a graph input; the members are its views in the graph.
    assert [v.name for v in p.views] == ["slot_base"]


def test_copied_group_copies_one_covering_member_and_aliases_the_rest():
    base = tensor("base", [4, 8])
    t = tensor("t", [8, 4], stride=[1, 8])
    saved = SavedSet((base, t), (group(0, [base, t], root=root("base", [4, 8]),
                                       user_visible=True),))
    (p,) = plan_arena(saved).placements
    assert p.write is Write.COPY and p.reason == "a user output shares its storage"
    assert p.copies == ("base",) and p.copied_bytes == 128
    assert {v.holds: v.storage_offset for v in p.views} == {"base": 0, "t": 0}


def test_slices_without_a_cover_copy_the_root_once():
    lo = tensor("lo", [4, 4], stride=[8, 1], dense=False)
    hi = tensor("hi", [4, 4], stride=[8, 1], offset=4, dense=False)
    saved = SavedSet((lo, hi), (group(0, [lo, hi], root=root("h", [4, 8])),))
    (p,) = plan_arena(saved, copy_free=False).placements
    assert p.copies == ("h",) and p.copied_bytes == 128
    assert {v.holds: v.storage_offset for v in p.views} == {"h": 0, "lo": 0, "hi": 4}


def test_members_are_copied_one_by_one_when_nothing_covers_them():
    lo = tensor("lo", [4, 4], stride=[8, 1], dense=False)
    hi = tensor("hi", [4, 4], stride=[8, 1], offset=4, dense=False)
    saved = SavedSet((lo, hi), (group(0, [lo, hi], root=None),))
    (p,) = plan_arena(saved).placements
    assert p.copies == ("lo", "hi") and p.copied_bytes == 128
    assert "larger or shared temporary" in p.reason


def test_expanded_member_copies_its_compact_bytes():
    e = tensor("e", [64, 8], stride=[0, 1], dense=False)
    saved = SavedSet((e,), (group(0, [e]),))
    (p,) = plan_arena(saved).placements
    assert p.nbytes == 32 and p.copied_bytes == 32


def test_params_and_inputs_take_no_slot_bytes():
    w = tensor("w", [8, 8], group=0)
    x = tensor("x", [4, 8], group=1)
    saved = SavedSet((w, x), (group(0, [w], Source.PARAM), group(1, [x], Source.INPUT)))
    plan = plan_arena(saved)
    assert [p.write for p in plan.placements] == [Write.NONE, Write.NONE]
    assert plan.capacity == 0 and plan.views == ()


def test_staged_inputs_get_regions_after_the_saved_groups():
    a = tensor("a", [4, 8], group=0)
    x = tensor("x", [4, 8], group=1)
    saved = SavedSet((a, x), (group(0, [a], root=root("a", [4, 8])),
                              group(1, [x], Source.INPUT)))
    plan = plan_arena(saved, staged_inputs=(tensor("primals_1", [4, 8], group=-1),))
    assert plan.placements[1].write is Write.STAGED
    assert [(v.name, v.storage_offset) for v in plan.staging] == [("stage_primals_1", 128)]
    assert plan.capacity == 1024 and [v.name for v in plan.views] == ["slot_a"]


def test_symbolic_sizes_give_symbolic_offsets_and_a_bound():
    a = tensor("a", [s0, 16], group=0)
    b = tensor("b", [s0, 16], group=1)
    saved = SavedSet((a, b), (group(0, [a], root=root("a", [s0, 16])),
                              group(1, [b], root=root("b", [s0, 16]))),
                     symbol_ranges={s0: (2, 100)})
    plan = plan_arena(saved)
    assert plan.placements[1].offset == align_up(64 * s0, 512)
    assert plan.capacity_bound == evaluate(plan.capacity, {s0: 100}) == 2 * 6656
    assert evaluate(plan.capacity, {s0: 3}) == 1024
    unbounded = SavedSet(saved.tensors, saved.groups, symbol_ranges={s0: (2, None)})
    assert plan_arena(unbounded).capacity_bound is None


def test_self_overlapping_tensor_is_refused_with_a_reason():
    u = tensor("u", [3, 4], stride=[2, 1], dense=False, overlapping=True)
    saved = SavedSet((u,), (group(0, [u]),))
    assert "overlaps itself" in unplaceable_reason(saved)


@pytest.mark.parametrize("shape,stride,expected", [
    ((4, 2, 8), (24, 16, 1), (False, False)),  # h[:, ::2] of (4, 3, 8): rows end where the next begin
    ((4, 8), (8, 1), (True, False)),
    ((3, 4), (1, 3), (True, False)),  # a transpose is dense
    ((4, 8), (4, 1), (False, True)),  # windows of 8 every 4 (unfold)
    ((4, 3), (2, 1), (False, True)),
], ids=["strided-slice", "contiguous", "transposed", "unfold", "overlapping-rows"])
def test_layout_judges_disjointness_by_span(shape, stride, expected):
    from fxslots.passes.layouts import dense_overlapping

    assert dense_overlapping(torch.empty_strided(shape, stride)) == expected


def test_plan_invariants_are_checked():
    a = tensor("a", [4], group=0)
    with pytest.raises(AssertionError, match="exactly one group"):
        SavedSet((a,), ())


def test_one_output_of_a_multi_output_op_is_written_in_place():
    mean = tensor("getitem_1", [8], group=0)
    r = Root("getitem_1", mean.shape, mean.stride, torch.float32, "aten::native_batch_norm.out",
             producer="native_batch_norm", output=1)
    (p,) = plan_arena(SavedSet((mean,), (group(0, [mean], root=r),))).placements
    assert p.write is Write.OUT and p.copies == () and [v.holds for v in p.views] == ["getitem_1"]
    assert "output 1 of native_batch_norm" in p.reason


def test_a_fused_projection_stays_whole_when_that_costs_less_than_copying_its_parts():
    # A QKV projection [4, 24]: k and v (two thirds of it) are saved, q is not.
    k = tensor("k", [4, 8], stride=[24, 1], offset=8, dense=False)
    v = tensor("v", [4, 8], stride=[24, 1], offset=16, dense=False)
    saved = SavedSet((k, v), (group(0, [k, v], root=root("qkv", [4, 24])),))
    (p,) = plan_arena(saved).placements
    assert p.write is Write.OUT and p.nbytes == 4 * 24 * 4 and p.copied_bytes == 0
    assert [x.holds for x in p.views] == ["qkv"] and p.storage_start == 0
    assert [p.member_offset(t) for t in (k, v)] == [32, 64]  # where they sit in the root
    assert "span 352 of the 384 bytes" in p.reason
    assert "keeping it whole costs 32 slot bytes" in p.reason


def test_a_small_slice_of_a_large_projection_is_copied_and_says_what_whole_would_cost():
    k = tensor("k", [4, 8], stride=[96, 1], offset=8, dense=False)
    saved = SavedSet((k,), (group(0, [k], root=root("qkv", [4, 96])),))
    (p,) = plan_arena(saved).placements
    assert p.write is Write.COPY and p.copies == ("k",) and p.copied_bytes == 128
    assert "fewer than the" in p.reason and p.remedy.startswith("a slot ")


def test_copied_groups_say_what_would_make_them_copy_free():
    a = tensor("a", [4, 8], group=0)
    r = Root("a", a.shape, a.stride, torch.float32, None, "aten::foo.out is composite on cpu",
             remedy="a cpu kernel for aten::foo.out")
    (p,) = plan_arena(SavedSet((a,), (group(0, [a], root=r),))).placements
    assert p.write is Write.COPY and p.remedy == "a cpu kernel for aten::foo.out"
    from fxslots.printing import format_plan

    text = format_plan(SavedSet((a,), (group(0, [a], root=r),),
                                passthrough=(("getitem_2", "an RNG state"),)),
                       plan_arena(SavedSet((a,), (group(0, [a], root=r),))))
    assert "copy-free would take: a cpu kernel for aten::foo.out" in text
    assert "passed to backward untouched: getitem_2 (an RNG state)" in text


def _stack(n):
    """``n`` storage groups over three symbols, twelve distinct sizes (a layer stack)."""
    s1 = sympy.Symbol("s1", integer=True, positive=True)
    s2 = sympy.Symbol("s2", integer=True, positive=True)
    sizes = [[s0, 16 * (i % 7 + 1)] if i % 2 else [s1, s2, i % 5 + 1] for i in range(n)]
    ts = [tensor(f"t{i}", shape, group=i) for i, shape in enumerate(sizes)]
    return SavedSet(tuple(ts), tuple(group(i, [t], root=root(t.name, t.shape))
                                     for i, t in enumerate(ts)),
                    symbol_ranges={s0: (2, 64), s1: (2, 32), s2: (2, 32)}), (s0, s1, s2)


def test_planning_is_linear_in_the_number_of_groups():
    """Symbolic offsets accumulate without sympy.simplify: four times the groups take about
    four times as long (a simplify per view made it quadratic and slow), and stay exact."""
    import time

    times = {}
    for n in (200, 800):
        saved, syms = _stack(n)
        t0 = time.perf_counter()
        plan = plan_arena(saved)
        times[n] = time.perf_counter() - t0
    assert times[800] < 8 * times[200] + 0.5, times
    env = dict(zip(syms, (5, 3, 7), strict=True))
    sizes = [-(-evaluate(t.nbytes, env) // 512) * 512 for t in saved.tensors]
    assert evaluate(plan.capacity, env) == sum(sizes)
    assert evaluate(plan.placements[-1].offset, env) == sum(sizes[:-1])
