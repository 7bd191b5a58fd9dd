"""Planning: a pure function from saved tensors to an arena plan. It never sees an FX graph.

Offsets and capacities are exact sympy expressions, built in linear time: a running offset is
kept as an integer plus a coefficient per symbolic term (``_Cursor``) and never simplified;
equalities between sizes are checked at sample shapes (``geometry.same_value``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import sympy

from ..geometry import (
    align_up, evaluate, itemsize, member_byte_offset, same_value, symbol_values, upper_bound,
)
from ..routes import COPY
from ..schemas import (
    ArenaPlan,
    Placement,
    SavedSet,
    SavedTensor,
    SlotView,
    Source,
    StorageGroup,
    Write,
)

Ranges = Mapping[sympy.Symbol, tuple[int, "int | None"]]
Decisions = Mapping[int, tuple[bool, str]]  # group -> (offloaded?, why)


def unplaceable_reason(saved: SavedSet) -> str | None:
    """Why this saved set cannot be placed in slots, or None when it can."""
    for t in saved.tensors:
        if t.overlapping:
            return (f"saved tensor {t.name} overlaps itself (stride {t.stride} over shape "
                    f"{t.shape}); fxslots cannot give it a slot layout")
    devices = {t.device for t in saved.tensors}
    if len(devices) > 1:
        return f"saved tensors live on several devices {sorted(devices)}"
    return None


class _Cursor:
    """A running byte offset in canonical form: an integer plus one product per symbolic term
    (``512*ceiling(s0/4)``...). Adding a size rebuilds only the products of the terms it
    touches, and reading the offset builds one sympy ``Add`` of a few terms: no simplify, and
    no re-flattening of a sum as long as the graph."""

    def __init__(self, alignment: int):
        self.alignment = alignment
        self.const = sympy.Integer(0)
        self.coeffs: dict[sympy.Expr, sympy.Expr] = {}
        self.products: dict[sympy.Expr, sympy.Expr] = {}
        self._value: sympy.Expr | None = sympy.Integer(0)

    @property
    def value(self) -> sympy.Expr:
        if self._value is None:
            self._value = sympy.Add(self.const, *self.products.values())
        return self._value

    def advance(self, nbytes: sympy.Expr) -> None:
        """Move past ``nbytes``, rounded up to the alignment."""
        step = sympy.sympify(align_up(nbytes, self.alignment))
        for term, coeff in step.as_coefficients_dict().items():
            if term == 1:
                self.const += coeff
                continue
            c = self.coeffs[term] = self.coeffs.get(term, sympy.Integer(0)) + coeff
            self.products[term] = c * term
        self._value = None


def plan_arena(saved: SavedSet, *, alignment: int = 512, copy_free: bool = True,
               staged_inputs: tuple[SavedTensor, ...] = (),
               offload: Decisions | frozenset[int] | Callable[[dict], Decisions] = frozenset(),
               outputs_copied: bool = False) -> ArenaPlan:
    """Give every storage group that needs a slot an aligned byte range in one slot's arena.

    All saved tensors are live at once (from their producer in forward to their reader in
    backward), so groups are packed end to end in order of first appearance. Variants reuse the
    same bytes: every variant's plan starts at 0, and the arena is sized by the largest.

    ``staged_inputs`` (CUDA graphs only) are the graph's non-static tensor inputs: each gets a
    region after the saved groups, where the runtime copies the caller's tensor before a replay.
    Saved views of those inputs then live in the slot too, with no copy of their own.

    Groups in ``offload`` go to the slot's host arena instead (packed the same way): the forward
    copies them there, the backward reloads them. A mapping gives each group the policy's
    decision and reason (kept groups say why they were not offloaded); a function (a budget:
    it needs the alignment and each group's write) maps ``_kept_bytes`` to one.
    ``outputs_copied`` (CUDA graphs): the runtime copies user outputs out for the caller, so a
    group one shares is written in place like any other (the caller's copy is made from the
    slot), not copied in.
    """
    writes = _Writes(copy_free, bool(staged_inputs), outputs_copied)
    offload = _decisions(offload, saved, writes, alignment)
    cursor, host = _Cursor(alignment), _Cursor(alignment)
    placements = [_place_group(saved, g, cursor, host, writes, offload.get(g.id, (False, "")))
                  for g in saved.groups]
    staging = [_stage(t, cursor) for t in staged_inputs]
    return ArenaPlan(
        placements=tuple(placements),
        capacity=cursor.value,
        copied_bytes=sympy.Add(*[p.copied_bytes for p in placements if p.write is Write.COPY]),
        alignment=alignment,
        capacity_bound=upper_bound(cursor.value, saved.symbol_ranges),
        staging=tuple(staging),
        host_capacity=host.value,
        offloaded_bytes=sympy.Add(*[p.copied_bytes for p in placements
                                    if p.write is Write.OFFLOAD]),
    )


def _decisions(offload: Decisions | frozenset[int] | Callable[[dict], Decisions],
               saved: SavedSet, writes: _Writes, alignment: int) -> Decisions:
    """``offload`` as a mapping: a set offloads each group in it, a function decides on what
    each group would hold of the device arena."""
    if callable(offload):
        return offload(_kept_bytes(saved, writes, alignment))
    if isinstance(offload, Mapping):
        return offload
    return {g: (True, "the offload policy chose it") for g in offload}


def _kept_bytes(saved: SavedSet, writes: _Writes, alignment: int) -> dict[int, sympy.Expr]:
    """What each slotted group would hold of the device arena if kept there: the bytes
    ``_place`` gives it (a storage written whole, all of it), padded to the alignment as the
    cursor pads them (40 groups of 16 bytes hold 20 KiB at 512)."""
    out = {}
    for g in saved.groups:
        if g.source is Source.INTERMEDIATE:
            members = [saved.tensor(m) for m in g.members]
            write, why = _choose_write(g, members, writes, saved.symbol_ranges)
            p = _place(g, members, sympy.Integer(0), write, why, saved.symbol_ranges)
            out[g.id] = sympy.sympify(align_up(p.nbytes, alignment))
    return out


def _stage(t: SavedTensor, cursor: _Cursor) -> SlotView:
    view = SlotView("stage_" + t.name, t.name, t.dtype, t.shape, t.stride,
                    cursor.value / t.itemsize)
    cursor.advance(t.nbytes)
    return view


@dataclass(frozen=True)
class _Writes:
    """What the plan may assume about how the slot is written and read."""

    copy_free: bool  # write values in place where an op can (options.copy_free)
    staging: bool  # the runtime stages the graph's inputs (CUDA graphs)
    outputs_copied: bool  # the runtime copies user outputs out for the caller (CUDA graphs)


def _place_group(saved: SavedSet, g: StorageGroup, cursor: _Cursor, host: _Cursor,
                 writes: _Writes, offload: tuple[bool, str]) -> Placement:
    """Place one group at the cursor of its arena (the host's when the offload policy chose
    it; ``offload`` is its decision and the reason)."""
    members = [saved.tensor(m) for m in g.members]
    if g.source is Source.INPUT and writes.staging:
        return _unslotted(g, Write.STAGED, "a view of a staged input")
    if g.source is not Source.INTERMEDIATE:
        return _unslotted(g, Write.NONE, "parameter or buffer: outlives every replay"
                          if g.source is Source.PARAM else "user input: the caller owns it")
    chosen, reason = offload
    if chosen:
        p = _place(g, members, host.value, Write.OFFLOAD, (reason, ""), saved.symbol_ranges,
                   host=True)
        host.advance(p.nbytes)
        return p
    write, why = _choose_write(g, members, writes, saved.symbol_ranges)
    if reason:
        why = (f"{why[0]}; kept on the device: {reason}", why[1])
    p = _place(g, members, cursor.value, write, why, saved.symbol_ranges)
    cursor.advance(p.nbytes)
    return p


def _unslotted(g: StorageGroup, write: Write, reason: str) -> Placement:
    return Placement(g.id, write, sympy.Integer(0), g.nbytes, (), sympy.Integer(0), (), reason)


def _choose_write(g: StorageGroup, members: list[SavedTensor], writes: _Writes,
                  ranges: Ranges) -> tuple[Write, tuple[str, str]]:
    """(write, (why, what would make it copy-free))."""
    if g.user_visible and not writes.outputs_copied:
        return Write.COPY, ("a user output shares its storage",
                            "CUDA graphs (whose runtime copies user outputs out of the slot), "
                            "or not returning this value from the model")
    write, why = _choose_slot_write(g, members, writes.copy_free, ranges)
    if g.user_visible and write is Write.OUT:
        why = (f"{why[0]}; a user output shares it: the caller's copy is made from the slot",
               why[1])
    return write, why


def _choose_slot_write(g: StorageGroup, members: list[SavedTensor], copy_free: bool,
                       ranges: Ranges) -> tuple[Write, tuple[str, str]]:
    if not copy_free:
        return Write.COPY, ("copy_free=False", "copy_free=True")
    r = g.root
    if r is None:
        return Write.COPY, ("its storage is a view of a larger or shared temporary",
                            "an op that allocates exactly the saved bytes: the first value in "
                            "this storage does not cover it")
    if r.out_overload is None:
        return Write.COPY, (r.why_not_out, r.remedy or "an out= form")
    if _root_covers(g, ranges):
        if r.out_overload == COPY:
            return Write.OUT, (f"{r.name} is itself a copy: {COPY} writes it into the slot", "")
        return Write.OUT, (f"{_route(r)} writes it in place", "")
    extra, copied = r.nbytes - g.nbytes, _copy_plan(g, members, ranges)[1]
    # every symbol of the two, a data-dependent one too (no range: an unbounded value)
    free = sympy.sympify(extra).free_symbols | sympy.sympify(copied).free_symbols
    env = next(symbol_values(ranges, free, points=("high",)), {})
    cover = f"the saved views span {g.nbytes} of the {r.nbytes} bytes of {r.name}"
    if evaluate(extra, env) <= evaluate(copied, env):
        return Write.OUT, (f"{_route(r)} writes all of {r.name} in place: {cover}, and keeping "
                           f"it whole costs {extra} slot bytes, no more than the {copied} bytes "
                           f"a copy of the views moves", "")
    return Write.COPY, (f"{cover}: copying them moves {copied} bytes, fewer than the {extra} "
                        f"slot bytes keeping it whole would cost",
                        f"a slot {extra} bytes larger (saving {r.name} whole)")


def _route(r) -> str:
    where = f" (output {r.output} of {r.producer})" if r.producer else ""
    via = f" ({r.via})" if r.via else ""
    return f"{r.out_overload}{where}{via}"


def _place(g: StorageGroup, members: list[SavedTensor], offset: sympy.Expr, write: Write,
           why: tuple[str, str], ranges: Ranges, host: bool = False) -> Placement:
    reason, remedy = why
    prefix = "host_" if host else "slot_"
    if write is Write.OUT:
        r = g.root
        whole = not _root_covers(g, ranges)
        view = SlotView(prefix + r.name, r.name, r.dtype, r.shape, r.stride,
                        offset / itemsize(r.dtype))
        return Placement(g.id, write, offset, r.nbytes if whole else g.nbytes, (),
                         sympy.Integer(0), (view,), reason, storage_start=sympy.Integer(0))
    views = tuple(SlotView(prefix + m.name, m.name, m.dtype, m.shape, m.stride,
                           member_byte_offset(offset, g.byte_start, m.storage_offset, m.dtype)
                           / m.itemsize, host) for m in members)
    copies, copied, of_root = _copy_plan(g, members, ranges)
    if of_root:  # the storage's producer is copied once; the members alias its view
        r = g.root
        views = (SlotView(prefix + r.name, r.name, r.dtype, r.shape, r.stride,
                          offset / itemsize(r.dtype), host),) + views
    return Placement(g.id, write, offset, g.nbytes, copies, copied, views, reason,
                     storage_start=g.byte_start, remedy=remedy)


def _copy_plan(g: StorageGroup, members: list[SavedTensor],
               ranges: Ranges) -> tuple[tuple[str, ...], sympy.Expr, bool]:
    """(values to copy, bytes copied, whether the root is copied): one member that covers the
    span, else the storage's producer once, else each member (overlapping members copy their
    shared bytes twice)."""
    covering = _covering_member(g, members, ranges)
    if covering is not None:
        return (covering.name,), covering.compact_bytes, False
    if g.root is not None and _root_covers(g, ranges):
        return (g.root.name,), g.root.nbytes, True
    return tuple(m.name for m in members), sympy.Add(*[m.compact_bytes for m in members]), False


def copied_whole(g: StorageGroup, members: list[SavedTensor], ranges: Ranges) -> bool:
    """Whether one dense tensor (a member, or the group's root) fills the group's span, so a
    single copy moves it. Offloading needs that: a copy to host memory that is not one dense
    block goes through a pageable temporary, which is synchronous and illegal in a capture."""
    return (_covering_member(g, members, ranges) is not None
            or (g.root is not None and _root_covers(g, ranges)))


def _covering_member(g: StorageGroup, members: list[SavedTensor],
                     ranges: Ranges) -> SavedTensor | None:
    return next((m for m in members if m.dense and same_value(m.nbytes, g.nbytes, ranges)),
                None)


def _root_covers(g: StorageGroup, ranges: Ranges) -> bool:
    return (same_value(g.byte_start, sympy.Integer(0), ranges)
            and same_value(g.nbytes, g.root.nbytes, ranges))
