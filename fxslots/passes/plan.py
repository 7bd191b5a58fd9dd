"""Planning: a pure function from saved tensors to an arena plan. It never sees an FX graph."""

from __future__ import annotations

from typing import Mapping

import sympy

from ..schemas import (
    ArenaPlan,
    Placement,
    SavedSet,
    SavedTensor,
    SlotView,
    Source,
    StorageGroup,
    Write,
    align_up,
)


def unplaceable_reason(saved: SavedSet) -> str | None:
    """Why this saved set cannot be placed in slots, or None when it can."""
    for t in saved.tensors:
        if t.overlapping:
            return (f"saved tensor {t.name} overlaps itself (stride {t.stride} over shape "
                    f"{t.shape}); fxslots cannot give it a slot layout")
    return None


def plan_arena(saved: SavedSet, *, alignment: int = 512, copy_free: bool = True,
               staged_inputs: tuple[SavedTensor, ...] = (),
               offload: Mapping[int, tuple[bool, str]] | frozenset[int] = frozenset()
               ) -> ArenaPlan:
    """Give every storage group that needs a slot an aligned byte range in one slot's arena.

    All saved tensors are live at once (from their producer in forward to their reader in
    backward), so groups are packed end to end in order of first appearance. Variants reuse the
    same bytes: every variant's plan starts at 0, and the arena is sized by the largest.

    ``staged_inputs`` (CUDA graphs only) are the graph's non-static tensor inputs: each gets a
    region after the saved groups, where the runtime copies the caller's tensor before a replay.
    Saved views of those inputs then live in the slot too, with no copy of their own.

    Groups in ``offload`` go to the slot's host arena instead (packed the same way): the forward
    copies them there, the backward reloads them. A mapping gives each group the policy's
    decision and reason (kept groups say why they were not offloaded).
    """
    if not isinstance(offload, Mapping):
        offload = {g: (True, "the offload policy chose it") for g in offload}
    cursor = host_cursor = sympy.Integer(0)
    placements = []
    for g in saved.groups:
        members = [saved.tensor(m) for m in g.members]
        if g.source is Source.INPUT and staged_inputs:
            placements.append(Placement(g.id, Write.STAGED, sympy.Integer(0), g.nbytes, (),
                                        sympy.Integer(0), (), "a view of a staged input"))
            continue
        if g.source is not Source.INTERMEDIATE:
            placements.append(_unslotted(g))
            continue
        chosen, why = offload.get(g.id, (False, ""))
        if chosen:
            placements.append(_place(g, members, host_cursor, Write.OFFLOAD, why, host=True))
            host_cursor = host_cursor + align_up(g.nbytes, alignment)
            continue
        write, reason = _choose_write(g, copy_free)
        placements.append(_place(g, members, cursor, write,
                                 f"{reason}; kept on the device: {why}" if why else reason))
        cursor = cursor + align_up(g.nbytes, alignment)
    staging = []
    for t in staged_inputs:
        staging.append(SlotView("stage_" + t.name, t.name, t.dtype, t.shape, t.stride,
                                sympy.simplify(cursor / t.itemsize)))
        cursor = cursor + align_up(t.nbytes, alignment)
    copied = sum((p.copied_bytes for p in placements if p.write is Write.COPY), sympy.Integer(0))
    offloaded = sum((p.copied_bytes for p in placements if p.write is Write.OFFLOAD),
                    sympy.Integer(0))
    return ArenaPlan(
        placements=tuple(placements),
        capacity=sympy.simplify(cursor),
        copied_bytes=sympy.simplify(copied),
        alignment=alignment,
        capacity_bound=_upper_bound(cursor, saved.symbol_ranges),
        staging=tuple(staging),
        host_capacity=sympy.simplify(host_cursor),
        offloaded_bytes=sympy.simplify(offloaded),
    )


def _unslotted(g: StorageGroup) -> Placement:
    reason = ("parameter or buffer: outlives every replay" if g.source is Source.PARAM
              else "user input: the caller owns it")
    return Placement(g.id, Write.NONE, sympy.Integer(0), g.nbytes, (), sympy.Integer(0), (), reason)


def _choose_write(g: StorageGroup, copy_free: bool) -> tuple[Write, str]:
    if g.user_visible:
        return Write.COPY, "a user output shares its storage"
    if not copy_free:
        return Write.COPY, "copy_free=False"
    if g.root is None:
        return Write.COPY, "its storage is a view of a larger or shared temporary"
    if g.root.out_overload is None:
        return Write.COPY, g.root.why_not_out or "no out= form"
    if not _root_covers(g):
        return Write.COPY, f"saved views cover only part of {g.root.name}"
    return Write.OUT, f"{g.root.out_overload} writes it in place"


def _root_bytes(g: StorageGroup) -> sympy.Expr:
    itemsize = _itemsize(g.root.dtype)
    n = sympy.Integer(itemsize)
    for s in g.root.shape:
        n = n * s
    return n


def _itemsize(dtype) -> int:
    import torch

    return torch.empty((), dtype=dtype).element_size()


def _place(g: StorageGroup, members: list[SavedTensor], offset: sympy.Expr, write: Write,
           reason: str, host: bool = False) -> Placement:
    if write is Write.OUT:
        r = g.root
        view = SlotView("slot_" + r.name, r.name, r.dtype, r.shape, r.stride,
                        sympy.simplify(offset / _itemsize(r.dtype)))
        return Placement(g.id, write, offset, g.nbytes, (), sympy.Integer(0), (view,), reason)
    views = tuple(
        SlotView(("host_" if host else "slot_") + m.name, m.name, m.dtype, m.shape, m.stride,
                 sympy.simplify((offset + m.storage_offset * m.itemsize - g.byte_start)
                                / m.itemsize), host)
        for m in members
    )
    covering = _covering_member(g, members)
    if covering is not None:  # one member holds every byte: copy it, the others alias it
        copies = (covering.name,)
        copied = covering.compact_bytes
    elif g.root is not None and _root_covers(g):  # copy the storage's producer once
        r = g.root
        views = (SlotView(("host_" if host else "slot_") + r.name, r.name, r.dtype, r.shape,
                          r.stride, sympy.simplify(offset / _itemsize(r.dtype)), host),) + views
        copies = (r.name,)
        copied = _root_bytes(g)
    else:  # copy each member; overlapping members copy their shared bytes twice
        copies = tuple(m.name for m in members)
        copied = sum((m.compact_bytes for m in members), sympy.Integer(0))
    return Placement(g.id, write, offset, g.nbytes, copies, sympy.simplify(copied), views,
                     reason)


def copied_whole(g: StorageGroup, members: list[SavedTensor]) -> bool:
    """Whether one dense tensor (a member, or the group's root) fills the group's span, so a
    single copy moves it. Offloading needs that: a copy to host memory that is not one dense
    block goes through a pageable temporary, which is synchronous and illegal in a capture."""
    return _covering_member(g, members) is not None or (g.root is not None and _root_covers(g))


def _covering_member(g: StorageGroup, members: list[SavedTensor]) -> SavedTensor | None:
    return next((m for m in members if m.dense and sympy.simplify(m.nbytes - g.nbytes) == 0),
                None)


def _root_covers(g: StorageGroup) -> bool:
    return (sympy.simplify(g.byte_start) == 0
            and sympy.simplify(g.nbytes - _root_bytes(g)) == 0)


def _upper_bound(e: sympy.Expr, ranges) -> int | None:
    """The value of ``e`` with each symbol at its upper bound (sizes grow monotonically)."""
    if e.is_Integer:
        return int(e)
    subs = {}
    for s in e.free_symbols:
        lo_hi = ranges.get(s)
        if lo_hi is None or lo_hi[1] is None:
            return None
        subs[s] = lo_hi[1]
    return int(e.xreplace({k: sympy.Integer(v) for k, v in subs.items()}))
