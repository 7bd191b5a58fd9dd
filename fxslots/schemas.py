"""The data that flows between fxslots' passes. Every type is frozen; invariants are checked.

Sizes, strides, offsets and byte counts are sympy expressions: plain ``sympy.Integer`` for static
shapes, expressions over the ShapeEnv's symbols (``s0``, ``s1``...) for dynamic ones. The planner
works on these types alone and never sees an FX graph.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, field
from typing import Mapping

import sympy
import torch

Expr = sympy.Expr


def expr(x) -> Expr:
    """A sympy expression for an int, a SymInt or an expression."""
    if isinstance(x, torch.SymInt):
        return sympy.sympify(x.node.expr)
    return sympy.sympify(x)


def evaluate(e: Expr, env: Mapping[sympy.Symbol, int]) -> int:
    """The integer value of ``e`` once its symbols are bound."""
    if e.is_Integer:
        return int(e)
    v = e.xreplace({s: sympy.Integer(env[s]) for s in e.free_symbols})
    if not v.is_Integer:
        raise ValueError(f"fxslots: {e} did not evaluate to an integer under {dict(env)}: {v}")
    return int(v)


def align_up(nbytes: Expr, alignment: int) -> Expr:
    """Round ``nbytes`` up to a multiple of ``alignment`` (stays exact when symbolic)."""
    if nbytes.is_Integer:
        return sympy.Integer(-(-int(nbytes) // alignment) * alignment)
    return alignment * sympy.ceiling(nbytes / alignment)


class Source(str, enum.Enum):
    """Where the storage behind a saved tensor comes from."""

    INTERMEDIATE = "intermediate"  # allocated inside the forward: needs a slot
    PARAM = "param"  # a parameter or buffer: outlives every replay, needs no slot
    INPUT = "input"  # a user input: owned by the caller, needs no slot outside CUDA graphs


class Write(str, enum.Enum):
    """How a storage group's bytes get into its slot."""

    OUT = "copy-free"  # the producer writes straight into the slot view (an out= form)
    COPY = "copied"  # the value is computed as before and copied into the slot
    NONE = "no slot"  # params and inputs: the tensor itself is saved
    STAGED = "staged"  # a CUDA graph input: the runtime copies it into the slot before replay
    OFFLOAD = "offloaded"  # copied to the slot's host arena in forward, reloaded for backward

    @property
    def owns_bytes(self) -> bool:
        """Whether the group takes bytes of its own in the slot."""
        return self in (Write.OUT, Write.COPY)


@dataclass(frozen=True)
class SavedTensor:
    """A forward output that only the backward consumes (one saved-tensor edge).

    Invariants: ``len(shape) == len(stride)``; ``name`` is both a forward output node and a
    backward placeholder; ``storage_offset`` is in elements of ``dtype``, absolute in the storage.
    """

    name: str
    shape: tuple[Expr, ...]
    stride: tuple[Expr, ...]
    storage_offset: Expr
    dtype: torch.dtype
    device: str
    group: int
    dense: bool  # non-overlapping and dense: one copy of it fills its span
    overlapping: bool  # some elements share memory through a nonzero stride (unfold): unplaceable

    def __post_init__(self) -> None:
        assert len(self.shape) == len(self.stride), (self.name, self.shape, self.stride)

    @property
    def itemsize(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()

    @property
    def span_elems(self) -> Expr:
        """Elements from the first to the last one addressed (inclusive)."""
        if any(s == 0 for s in self.shape):
            return sympy.Integer(0)
        return 1 + sum(((s - 1) * st for s, st in zip(self.shape, self.stride, strict=True)),
                       sympy.Integer(0))

    @property
    def nbytes(self) -> Expr:
        return self.span_elems * self.itemsize

    @property
    def compact_bytes(self) -> Expr:
        """Bytes a copy of it moves: stride-0 (expanded) dimensions count once."""
        n = sympy.Integer(self.itemsize)
        for s, st in zip(self.shape, self.stride, strict=True):
            if st != 0:
                n = n * s
        return n


@dataclass(frozen=True)
class Root:
    """The forward node that allocates a group's storage, covering it densely from byte 0."""

    name: str
    shape: tuple[Expr, ...]
    stride: tuple[Expr, ...]
    dtype: torch.dtype
    out_overload: str | None  # e.g. "aten::mm.out" when the producer has an out= form
    why_not_out: str | None = None  # the reason no out= form applies, when out_overload is None


@dataclass(frozen=True)
class StorageGroup:
    """Saved tensors that view one storage; placed together so aliases, strides, offsets survive.

    Invariants: ``members`` is non-empty; ``byte_start`` and ``nbytes`` cover every byte any
    member addresses in the storage.
    """

    id: int
    source: Source
    members: tuple[str, ...]
    byte_start: Expr
    nbytes: Expr
    root: Root | None = None
    user_visible: bool = False  # a user output or mutated input shares this storage

    def __post_init__(self) -> None:
        assert self.members, f"storage group {self.id} has no members"


@dataclass(frozen=True)
class SavedSet:
    """Everything the analysis found: saved tensors in backward-placeholder order, and groups."""

    tensors: tuple[SavedTensor, ...]
    groups: tuple[StorageGroup, ...]
    symbol_ranges: Mapping[sympy.Symbol, tuple[int, int | None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = [t.name for t in self.tensors]
        assert len(set(names)) == len(names), f"saved tensor listed twice: {names}"
        in_groups = sorted(m for g in self.groups for m in g.members)
        assert in_groups == sorted(names), "every saved tensor is in exactly one group"

    def tensor(self, name: str) -> SavedTensor:
        return next(t for t in self.tensors if t.name == name)


@dataclass(frozen=True)
class SlotView:
    """A tensor the runtime makes over a slot's arena at each forward and passes to the graph.

    ``storage_offset`` is in elements of ``dtype`` from the arena's first byte.
    """

    name: str  # the forward graph's placeholder
    holds: str  # the saved tensor (or group root) whose value it receives
    dtype: torch.dtype
    shape: tuple[Expr, ...]
    stride: tuple[Expr, ...]
    storage_offset: Expr
    host: bool = False  # a view of the slot's host arena (an offloaded group), not its device one


@dataclass(frozen=True)
class Placement:
    """Where one storage group lives in a slot, and how its bytes get there."""

    group: int
    write: Write
    offset: Expr  # bytes from the arena's start (the host arena's, when offloaded); aligned
    nbytes: Expr  # the group's span
    copies: tuple[str, ...]  # values copied into the slot: a member, or the group's root
    copied_bytes: Expr
    views: tuple[SlotView, ...]
    reason: str  # why this write kind was chosen


@dataclass(frozen=True)
class ArenaPlan:
    """The placement of every storage group of one variant in one slot's arena.

    Invariants: placements are sorted by offset, aligned, and do not overlap; ``capacity`` is the
    end of the last placement, rounded up to ``alignment``.
    """

    placements: tuple[Placement, ...]
    capacity: Expr
    copied_bytes: Expr
    alignment: int
    capacity_bound: int | None  # max capacity over the symbols' value ranges; None if unbounded
    staging: tuple[SlotView, ...] = ()  # CUDA graphs: where each non-static input is staged
    host_capacity: Expr = sympy.Integer(0)  # bytes of the slot's host arena (offloaded groups)
    offloaded_bytes: Expr = sympy.Integer(0)  # bytes copied to the host per forward

    def __post_init__(self) -> None:
        for kinds in ((Write.OUT, Write.COPY), (Write.OFFLOAD,)):  # device arena, host arena
            placed = [p for p in self.placements if p.write in kinds]
            for p in placed:
                assert p.offset.is_Integer is False or int(p.offset) % self.alignment == 0, p
            for a, b in zip(placed, placed[1:]):
                gap = sympy.simplify(b.offset - (a.offset + a.nbytes))
                assert not (gap.is_number and gap < 0), f"groups {a.group} and {b.group} overlap"

    @functools.cached_property
    def views(self) -> tuple[SlotView, ...]:
        """The views the forward graph takes as extra placeholders, in order: the device
        arena's, then the host arena's."""
        own = [v for p in self.placements if p.write is not Write.STAGED for v in p.views]
        return tuple([v for v in own if not v.host] + [v for v in own if v.host])

    @functools.cached_property
    def host_view_count(self) -> int:
        return sum(v.host for v in self.views)

    def placement(self, group: int) -> Placement:
        return next(p for p in self.placements if p.group == group)

    @property
    def copy_free_bytes(self) -> Expr:
        return sum((p.nbytes for p in self.placements if p.write is Write.OUT), sympy.Integer(0))

    @property
    def slot_bytes(self) -> Expr:
        return sum((p.nbytes for p in self.placements if p.write.owns_bytes), sympy.Integer(0))
