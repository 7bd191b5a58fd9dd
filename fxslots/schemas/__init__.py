"""The data that flows between fxslots' passes. Every type is frozen; invariants are checked.

Sizes, strides, offsets and byte counts are sympy expressions: plain ``sympy.Integer`` for static
shapes, expressions over the ShapeEnv's symbols (``s0``, ``s1``...) for dynamic ones. The planner
works on these types alone and never sees an FX graph.
"""

from __future__ import annotations

import enum
import functools
import itertools
from dataclasses import dataclass, field
from typing import Mapping

import sympy
import torch

from .. import _torch
from ..geometry import (
    align_up, compact_elements, evaluate, itemsize, member_byte_offset, span_elements,
)
from .transfers import Transfers  # offload scheduling's; evaluate, align_up: re-exported
__all__ = ["Transfers", "align_up", "evaluate", "expr"]

SLOT_META = "fxslots"  # node.meta key: what a pass did at this node, for printing

Expr = sympy.Expr


def expr(x) -> Expr:
    """A sympy expression for an int, a SymInt or an expression."""
    if isinstance(x, torch.SymInt):
        return sympy.sympify(_torch.sym_expr(x))
    return sympy.sympify(x)


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

    Invariants: ``len(shape) == len(stride)``; ``storage_offset`` is in elements of ``dtype``,
    absolute in the storage. ``name`` is the forward node; the backward receives it as its
    placeholder number ``backward_index`` (matched by position, as AOTAutograd passes it: the
    backward may name it differently). Both indices are -1 in hand-built plans.
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
    output_index: int = -1  # its position among the forward graph's outputs
    backward_index: int = -1  # its position among the backward graph's placeholders

    def __post_init__(self) -> None:
        assert len(self.shape) == len(self.stride), (self.name, self.shape, self.stride)

    @property
    def itemsize(self) -> int:
        return itemsize(self.dtype)

    @property
    def span_elems(self) -> Expr:
        """Elements from the first to the last one addressed (inclusive). A dense tensor spans
        exactly its elements: the product of its sizes is that span in its shortest form (its
        strides may carry guards such as ``Max(1, s0)`` that the span formula would keep)."""
        if self.dense:
            return sympy.Mul(*self.shape)
        return sympy.sympify(span_elements(self.shape, self.stride))

    @property
    def nbytes(self) -> Expr:
        return self.span_elems * self.itemsize

    @property
    def compact_bytes(self) -> Expr:
        """Bytes a copy of it moves: stride-0 (expanded) dimensions count once."""
        return sympy.sympify(compact_elements(self.shape, self.stride)) * self.itemsize


@dataclass(frozen=True)
class Root:
    """The forward value that allocates a group's storage, covering it densely from byte 0.

    For an op with several outputs (``native_batch_norm``...) it is one ``getitem`` of the
    op: ``producer`` names the op's node and ``output`` says which of its outputs it is.
    Invariants: exactly one of ``out_overload`` and ``why_not_out`` is set; ``remedy`` says
    what would make a root without a route copy-free.
    """

    name: str
    shape: tuple[Expr, ...]
    stride: tuple[Expr, ...]
    dtype: torch.dtype
    # How the producer writes into given memory: its out= overload ("aten::mm.out"), or
    # "aten::copy_" for an op that is itself a copy (clone, _to_copy).
    out_overload: str | None
    why_not_out: str | None = None  # why no route applies, when out_overload is None
    remedy: str | None = None  # what it would take to write it in place
    producer: str | None = None  # the multi-output op computing it; None: ``name`` itself
    output: int = 0  # which output of ``producer``
    via: str | None = None  # the op sequence replayed to reach ``out_overload``, if any

    def __post_init__(self) -> None:
        assert (self.out_overload is None) != (self.why_not_out is None), self
        assert self.producer is not None or self.output == 0, self

    @property
    def nbytes(self) -> Expr:
        n = sympy.Integer(itemsize(self.dtype))
        for s in self.shape:
            n = n * s
        return n


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


RNG_STATE = "an RNG state"  # SavedSet.passthrough's word for a checkpointed op's RNG state


@dataclass(frozen=True)
class SavedSet:
    """Everything the analysis found: saved tensors in backward-placeholder order, and groups."""

    tensors: tuple[SavedTensor, ...]
    groups: tuple[StorageGroup, ...]
    symbol_ranges: Mapping[sympy.Symbol, tuple[int, int | None]] = field(default_factory=dict)
    # Saved values that take no part in planning and reach the backward untouched, as
    # (forward node, what it is): RNG states of checkpointed random ops, symbolic ints.
    passthrough: tuple[tuple[str, str], ...] = ()
    # Dynamo's guards over these symbols: sizes the graph never runs at fail one of them.
    symbol_guards: tuple[sympy.Basic, ...] = ()
    unstageable: tuple[str, ...] = ()  # why CUDA graphs cannot stage its inputs (passes.absolute)

    @property
    def rng_states(self) -> tuple[str, ...]:
        return tuple(name for name, what in self.passthrough if what == RNG_STATE)

    def __post_init__(self) -> None:
        names = [t.name for t in self.tensors]
        assert len(set(names)) == len(names), f"saved tensor listed twice: {names}"
        in_groups = sorted(m for g in self.groups for m in g.members)
        assert in_groups == sorted(names), "every saved tensor is in exactly one group"

    def tensor(self, name: str) -> SavedTensor:
        return self._by_name[name]

    @functools.cached_property
    def _by_name(self) -> dict[str, SavedTensor]:
        return {t.name: t for t in self.tensors}


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
    """Where one storage group lives in a slot, and how its bytes get there.

    Invariants: a copy-free placement copies nothing; a copied or offloaded one copies at
    least one value.
    """

    group: int
    write: Write
    offset: Expr  # bytes from the arena's start (the host arena's, when offloaded); aligned
    nbytes: Expr  # bytes it holds: the group's span, or its whole root when kept whole
    copies: tuple[str, ...]  # values copied into the slot: a member, or the group's root
    copied_bytes: Expr
    views: tuple[SlotView, ...]
    reason: str  # why this write kind was chosen
    storage_start: Expr = sympy.Integer(0)  # the storage byte that lands at ``offset``
    remedy: str = ""  # for a copied group: what it would take to write it in place

    def __post_init__(self) -> None:
        if self.write is Write.OUT:
            assert not self.copies and self.copied_bytes == 0, self
        if self.write in (Write.COPY, Write.OFFLOAD):
            assert self.copies, self

    def member_offset(self, t: "SavedTensor") -> Expr:
        """Arena byte (host arena's, when offloaded) where member ``t`` starts."""
        return member_byte_offset(self.offset, self.storage_start, t.storage_offset, t.dtype)


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
            for a, b in itertools.pairwise(placed):
                # Symbolic gaps are checked at concrete shapes by verify_forward: subtracting
                # long symbolic sums here would make planning quadratic.
                if a.offset.is_Integer and a.nbytes.is_Integer and b.offset.is_Integer:
                    assert b.offset >= a.offset + a.nbytes, (
                        f"groups {a.group} and {b.group} overlap")

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
        return sympy.Add(*[p.nbytes for p in self.placements if p.write is Write.OUT])

    @property
    def staged_bytes(self) -> Expr:  # inputs copied into the slot before each replay: copies
        # what the copies move, not the span they land in (x[::2] leaves gaps)
        return sympy.Add(*[compact_elements(v.shape, v.stride) * v.dtype.itemsize
                           for v in self.staging])

    @property
    def slot_bytes(self) -> Expr:
        return sympy.Add(*[p.nbytes for p in self.placements if p.write.owns_bytes])
