"""Byte geometry: one definition for ints (the runtime) and sympy sizes (the planner)."""

from __future__ import annotations

import sympy
import torch

from fxslots import geometry as g

s0 = sympy.Symbol("s0", integer=True, positive=True)
s1 = sympy.Symbol("s1", integer=True, positive=True)


def test_span_and_compact_elements_take_ints_and_expressions():
    assert g.span_elements((4, 8), (8, 1)) == 32
    assert isinstance(g.span_elements((4, 8), (8, 1)), int)
    assert g.span_elements((4, 8), (1, 4)) == 32  # transposed
    assert g.span_elements((3, 0), (1, 1)) == 0
    assert g.span_elements((s0, 8), (8, 1)) == 8 * s0
    assert g.compact_elements((64, 8), (0, 1)) == 8  # an expanded dimension counts once
    assert g.compact_elements((s0, 8), (0, 1)) == 8


def test_align_up_and_itemsize():
    assert g.align_up(1, 512) == 512 and g.align_up(1024, 512) == 1024
    assert g.align_up(sympy.Integer(513), 512) == 1024
    assert g.align_up(128 * s0, 512) == 512 * sympy.ceiling(s0 / 4)
    assert g.itemsize(torch.bfloat16) == 2 and g.itemsize(torch.int64) == 8


def test_member_byte_offset_counts_from_the_placements_first_storage_byte():
    # A member 16 floats into its storage, in a placement at arena byte 1024 that holds the
    # storage from its byte 32 on.
    assert g.member_byte_offset(1024, 32, 16, torch.float32) == 1024 + 64 - 32


def test_one_picker_of_symbol_values():
    ranges = {s0: (2, 100), s1: (4, None)}
    assert list(g.symbol_values(ranges, points=("low",))) == [{s0: 2, s1: 4}]
    assert list(g.symbol_values(ranges, [s0], points=("high",))) == [{s0: 100}]
    highs = list(g.symbol_values(ranges, points=("high",), unbounded=64))
    assert highs == [{s0: 100, s1: 64}]
    assert list(g.symbol_values(ranges, points=("high",), unbounded=None)) == []
    assert len(list(g.symbol_values(ranges))) == 9  # low, mid, high of each
    assert g.upper_bound(8 * s0, ranges) == 800 and g.upper_bound(8 * s1, ranges) is None


def test_same_value_without_simplify():
    assert g.same_value(512 * sympy.ceiling(s0 / 4), 512 * sympy.ceiling(s0 / 4), {})
    assert g.same_value(sympy.Max(1, s0) * 4, 4 * s0, {s0: (2, None)})
    assert not g.same_value(sympy.floor(s0 / 2) * 2, s0, {s0: (2, None)})


def test_same_value_when_a_shared_symbol_cancels():
    # t cancels from the difference; evaluating each side alone would need it bound
    t = sympy.Symbol("t", integer=True, positive=True)
    assert g.same_value(sympy.Max(1, s0) * 4 + t, 4 * s0 + t, {s0: (2, None)})
    assert not g.same_value(sympy.floor(s0 / 2) * 2 + t, s0 + t, {s0: (2, None)})
    assert g.evaluate(s0 * s1, {s0: 3, s1: 5}) == 15


def test_guarded_samples_keep_to_the_shapes_dynamo_allows():
    even = [sympy.Eq(sympy.Mod(s0, 2), 0)]
    samples = list(g.guarded_symbol_values({s0: (2, None)}, {s0}, even))
    assert samples and all(e[s0] % 2 == 0 for e in samples), samples
    assert {e[s0] for e in samples} > {2}  # more than the lower bound survives
    # a guard on another symbol is not this sample's business
    t = sympy.Symbol("t", integer=True, positive=True)
    assert list(g.guarded_symbol_values({s0: (2, 4)}, {s0}, [sympy.Eq(sympy.Mod(t, 2), 0)])) \
        == list(g.symbol_values({s0: (2, 4)}, {s0}))
    # nothing satisfies it: the plain samples, so a check never silently checks nothing
    never = [sympy.Eq(sympy.Mod(s0, 1000), 999)]
    assert list(g.guarded_symbol_values({s0: (2, 8)}, {s0}, never)) == \
        list(g.symbol_values({s0: (2, 8)}, {s0}))


def test_guarded_samples_find_a_size_a_guard_pins():
    """Found by review (session 45, fuzz draw 50029): ``Eq(2*(s0//2), 8)`` with ``s0`` even
    pins s0 at 8, which none of the usual points (4, 5, 11, 12, ...) meets; the unfiltered
    samples then made verify refuse a right plan at s0 = 11. The pinned value is searched
    from the lower bound; other symbols keep their usual points."""
    pins = [sympy.Eq(2 * sympy.floor(s0 / 2), 8), sympy.Eq(sympy.Mod(s0, 2), 0)]
    samples = list(g.guarded_symbol_values({s0: (4, None), s1: (2, None)}, {s0, s1},
                                           pins + [sympy.Ne(s1, 3)]))
    assert samples and {e[s0] for e in samples} == {8}, samples
    assert len({e[s1] for e in samples}) > 1


def test_row_major_reads_strides_as_expressions():
    assert g.row_major((4, 8), (8, 1)) and not g.row_major((4, 8), (1, 4))
    assert g.row_major((s0, 8), (8, 1)) and g.row_major((s0, s1), (s1, 1))
    assert not g.row_major((s0, s1), (s1 + 1, 1))  # padded rows: not at every shape
    assert g.row_major((s0, 1, 8), (8, 99, 1))  # a size-1 dimension's stride is free
    assert not g.row_major((2, s0), (s0, 2))
