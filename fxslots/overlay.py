"""Gradients in the slot's arena: where a backward may write each gradient it hands out, in bytes
of saved tensors it has finished reading.

Eager PyTorch allocates a parameter's gradient in the middle of the backward, in memory the
caching allocator took back from activations the backward is done with. Under CUDA graphs
fxslots' gradients need addresses of their own (the output buffer, outside the pool), so the
arena (the forward's saved tensors) and the gradients were both held at the backward's end: on
the heavy benchmark model 0.25 GiB above eager's peak. The backward of a slot reads its arena
and nothing after it does (the slot is free once it returns), so a gradient written after the
last read of some saved bytes can live there, until the next forward into that slot: the ring
keeps a slot whose arena holds gradients someone still uses out of reach
(``runtime.ring.Slot.lend``). The backward's temporaries, which the pool holds beside the
arena, can borrow the same dead bytes for as long as they live (``Temporary``): eager's
allocator serves them from freed activations too.

The plan is data: ``place`` takes byte spans with the position of their last read and items
(gradients, temporaries) with the positions of their write and last read, and returns an
offset (or None) per item. It never sees a graph; ``passes/lifetimes.py`` reads the positions
from one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from .geometry import Number, align_up
from .sizes import at as _at

NEVER = -1  # a span no node of the backward reads: free from its start
END = 1 << 62  # read by the backward's output (handed out): never free


@dataclass(frozen=True)
class Temporary:
    """A value the delivering backward computes and has finished reading before it returns,
    whose producer has an out= kernel: it can be computed into bytes of the arena instead of
    the pool (``passes/borrow.py``). Positions are the delivering backward's nodes."""

    write: int  # the node that computes it
    last_read: int  # the last node that reads it (or a value sharing its bytes)
    nbytes: Number  # a sympy expression of shape symbols where the graph's shapes are
    geometry: tuple  # (dtype, shape, stride) of the view it is computed into, likewise

    def at(self, values: Mapping[str, int]) -> "Temporary":
        """This temporary at one shape (symbol name -> value)."""
        dtype, shape, stride = self.geometry
        return replace(self, nbytes=_at(self.nbytes, values), geometry=(
            dtype, tuple(_at(x, values) for x in shape), tuple(_at(x, values) for x in stride)))


@dataclass(frozen=True)
class InPlace:
    """A pointwise op of the delivering backward that computes its result over the bytes of a
    saved tensor it is the last to read (``passes/borrow.reinplace``): its node, the argument
    placeholder it writes over, and that tensor's storage group."""

    write: int
    arg: int
    group: int
    nbytes: Number  # as ``Temporary.nbytes``
    last_read: int  # the last node reading the result, and so its input's group

    def at(self, values: Mapping[str, int]) -> "InPlace":
        """This result at one shape (symbol name -> value)."""
        return replace(self, nbytes=_at(self.nbytes, values))


@dataclass(frozen=True)
class Overlay:
    """What a delivering backward reads and writes, by position in its node order (ATen kernels
    run in that order): the static half of a plan, made once per variant.

    Invariants: ``writes`` and ``nbytes`` have one entry per delivered gradient, in the order
    of ``Deliver.outputs``; every position is NEVER, END or a node's index; ``graph`` is the
    delivering backward that takes one view per temporary after the gradients' and computes
    the ``inplace`` results over their inputs (None: neither), with the same nodes in the same
    order besides those placeholders; ``reads`` are that graph's (an in-place result's readers
    read its input's group), which the plain delivering backward's never exceed.
    """

    reads: Mapping[int, int]  # storage group -> position of the last node that reads it
    writes: tuple[int, ...]  # per delivered gradient: the node that writes it
    nbytes: tuple[int, ...]  # per delivered gradient: bytes it spans
    temps: tuple[Temporary, ...] = ()
    graph: Any = None
    inplace: tuple[InPlace, ...] = ()

    def __post_init__(self) -> None:
        assert len(self.writes) == len(self.nbytes), (self.writes, self.nbytes)
        assert all(w >= 0 for w in self.writes), self.writes
        assert all(0 <= t.write <= t.last_read < END for t in self.temps), self.temps
        assert (self.graph is None) == (not self.temps and not self.inplace), (
            "temporaries come with their graph")
        assert len({p.group for p in self.inplace}) == len(self.inplace), self.inplace

    def at(self, values: Mapping[str, int]) -> "Overlay":
        """This overlay at one shape (symbol name -> value): its temporaries' sizes evaluated,
        as ``place_at`` and ``temp_bytes`` need them. A graph of symbolic shapes runs at many;
        the runtime asks once per layout."""
        if all(isinstance(x.nbytes, int) for x in (*self.temps, *self.inplace)):
            return self
        return replace(self, temps=tuple(t.at(values) for t in self.temps),
                       inplace=tuple(p.at(values) for p in self.inplace))

    @property
    def temp_bytes(self) -> int:
        """Bytes of the temporaries its graph computes in the arena (in views, over inputs)."""
        return sum(t.nbytes for t in (*self.temps, *self.inplace))

    def borrows(self, temp_offsets: Sequence[int | None]) -> bool:
        """Whether its graph runs at a layout whose ``place_at`` gave the temporaries these
        offsets: only where every one fits (the graph takes a view for each)."""
        return self.graph is not None and None not in temp_offsets

    def place_at(self, groups: Sequence[tuple[int, int, int]], capacity: int, alignment: int
                 ) -> tuple[list["Span"], tuple[int | None, ...], tuple[int | None, ...]]:
        """The spans of an arena's groups ``(offset, nbytes, group id)`` at one shape, each
        gradient's offset among them, then each temporary's in what the gradients leave
        (``place``): gradients first, so borrowing never sends one to the output buffer."""
        spans = spans_of(groups, self.reads)
        grads = [(n, w, END) for n, w in zip(self.nbytes, self.writes, strict=True)]
        at = place(spans, capacity, grads, alignment)
        taken = [Span(off, off + n, END, written=w) for (n, w, _), off in zip(grads, at,
                                                                               strict=True)
                 if off is not None]
        temps = [(t.nbytes, t.write, t.last_read) for t in self.temps]
        return spans, at, place(spans + taken, capacity, temps, alignment)


@dataclass(frozen=True)
class Span:
    """Bytes ``[start, end)`` of an arena, busy from node ``written`` (NEVER: from the start)
    through node ``last_read``."""

    start: int
    end: int
    last_read: int
    group: int | None = None  # the storage group whose bytes these are, when one is
    written: int = NEVER


def place(spans: Sequence[Span], capacity: int, items: Sequence[tuple[int, ...]],
          alignment: int) -> tuple[int | None, ...]:
    """An aligned byte offset in ``[0, capacity)`` for each item ``(nbytes, written at)``
    (a gradient: kept to the backward's end) or ``(nbytes, written at, last read)`` (a
    temporary), or None where none fits: an item busy from node w through node r may take
    bytes no span or other item is busy in at any node of ``[w, r]`` (a node that reads some
    bytes never writes its result over them).

    Items are placed in the order they are written, each in the smallest hole that holds it
    (the large holes stay for large items written later); bytes outside every span
    (alignment gaps, the arena's tail past this variant's layout) are free from the start.
    """
    busy = [(s.start, s.end, s.written, s.last_read) for s in spans]
    offsets: list[int | None] = [None] * len(items)
    for k in sorted(range(len(items)), key=lambda k: (items[k][1], -items[k][0])):
        nbytes, w, r = (*items[k], END)[:3]
        hole = _smallest_hole(_holes([(a, b) for a, b, f, last in busy if f <= r and w <= last],
                                     capacity, alignment), nbytes)
        if hole is not None:
            offsets[k] = hole
            busy.append((hole, hole + nbytes, w, r))
    return tuple(offsets)


def _holes(busy: list[tuple[int, int]], capacity: int, alignment: int) -> list[tuple[int, int]]:
    """The free ``[start, end)`` runs of ``[0, capacity)``, starts aligned."""
    holes, at = [], 0
    for start, end in sorted(busy) + [(capacity, capacity)]:
        lo = align_up(at, alignment)
        if start > lo:
            holes.append((lo, start))
        at = max(at, end)
    return holes


def _smallest_hole(holes: list[tuple[int, int]], nbytes: int) -> int | None:
    fits = [(end - start, start) for start, end in holes if end - start >= nbytes]
    return min(fits)[1] if fits else None


def spans_of(groups: Sequence[tuple[int, int, int]], reads: Mapping[int, int]) -> list[Span]:
    """Spans of an arena's groups ``(offset, nbytes, group id)`` at one shape; a group no
    backward node reads is left out (free from the start)."""
    return [Span(off, off + n, reads[g], g) for off, n, g in groups
            if reads.get(g, NEVER) != NEVER and n > 0]


def warm_up_peaks(plain: tuple[int, int], twin: tuple[int, int], kept: int, undelivered: int,
                  buffer: int) -> tuple[int, int]:
    """The peaks of an uncaptured backward whose kept gradients go to one buffer: (copied
    there after the plain backward, computed there by the delivering twin).

    ``plain``, ``twin``: each graph's ``lifetimes.allocated_peak`` (peak, held at return);
    ``kept``: bytes of the gradients autograd may keep; ``undelivered``: those of them the twin
    does not deliver (copied after in both cases); ``buffer``: the twin's buffer, allocated
    before it runs. Copied after, every kept gradient is held twice once the backward returns;
    delivered, the buffer is held through the whole backward, which costs more where the
    backward's own peak comes before its gradients (a loss head's logits: llama-large's warm-up
    peaked 0.92 GiB higher delivering, H200 run 29e; llama-small's 0.15 GiB lower, run 29d)."""
    copied_after = max(plain[0], plain[1] + kept)
    delivering = max(buffer + twin[0], buffer + twin[1] + undelivered)
    return copied_after, delivering
