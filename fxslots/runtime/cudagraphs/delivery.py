"""Where a delivering backward writes the gradients it hands out: the region's output buffer
(``staging.OutputBuffer``), or saved bytes of its slot's arena it has finished reading
(``fxslots.overlay``), the rest still in the buffer; and where it computes its large
temporaries: in the pool, or in those bytes too, where each of them finds some. (Where a
delivering forward writes its outputs: ``banks.py``.)"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from ... import _torch, state
from ..layout import make_views, pack, view_runs
from ..ring import Slot
from ..variant import BORROWS, IN_ARENA
from .staging import aliased, compact_grads, fresh_views

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Target:
    """The aliases one backward's gradients are handed out through."""

    buffer: Any  # the output buffer's, or None: every gradient is in the arena
    arena: Any  # the slot's arena's, over the gradients placed there, or None
    generation: int  # the output buffer's generation the graph writes (-1: none)
    runs: tuple  # of the gradients in the buffer (runtime.layout.view_runs)
    placed: "Placement | None" = None

    @property
    def overlay(self) -> int:
        """``CaptureKey.overlay``: 0, IN_ARENA (gradients in the arena) or BORROWS (and
        temporaries: the graph ``overlay.Overlay.graph``)."""
        if self.arena is None:
            return 0
        return BORROWS if self.placed.borrows else IN_ARENA

    def views(self, device: Any) -> list[Any]:
        """The graph's gradient arguments, in delivery order, then its temporaries'. Only a
        run that is not a replay needs them (a captured graph writes the addresses of its
        capture): built on demand."""
        rest = [] if self.buffer is None else make_views(self.buffer, device, None, self.runs)
        if self.placed is None:
            return rest
        in_arena = iter(make_views(self.arena, device, None, self.placed.arena_runs))
        others = iter(rest)
        grads = [next(in_arena) if a else next(others) for a in self.placed.in_arena]
        return grads + make_views(self.arena, device, None, self.placed.temp_runs)


@dataclass(frozen=True)
class Placement:
    """Where each delivered gradient goes at one layout and arena size."""

    in_arena: tuple[bool, ...]  # per delivered gradient
    arena_spans: tuple[tuple[int, int], ...]  # the bytes of those in the arena
    arena_runs: tuple  # their views over the arena (runtime.layout.view_runs, grouped once)
    buffer_runs: tuple  # the others', packed in the buffer
    buffer_nbytes: int
    temp_runs: tuple = ()  # the temporaries' views over the arena (none: not every one fits)
    temp_bytes: int = 0  # of temporaries in its arena: in views, and computed over inputs
    borrows: bool = False  # the backward runs Overlay.graph: every temporary fits

    @property
    def arena_bytes(self) -> int:
        return sum(end - start for start, end in self.arena_spans)


def place_grads(deliver: Any, layout: Any, capacity: int, alignment: int) -> Placement:
    """The plan (``overlay.place``) for one layout, as geometry for the views. Temporaries
    borrow arena bytes only where every one of them fits: the graph that computes them there
    takes a view for each."""
    ov = deliver.overlay.at(layout.values)
    _, offsets, temp_offsets = ov.place_at(layout.groups, capacity, alignment)
    arena, spans, rest = [], [], []
    for (dtype, _, shape, stride), off, n in zip(deliver.geometry, offsets, ov.nbytes,
                                                strict=True):
        if off is None:
            rest.append((dtype, shape, stride))
        else:
            arena.append((dtype, off // dtype.itemsize, shape, stride))
            spans.append((off, off + n))
    buffer_geometry, buffer_nbytes = pack(rest, alignment)
    borrows = ov.borrows(temp_offsets)
    temps = [(dtype, off // dtype.itemsize, shape, stride) for (dtype, shape, stride), off
             in zip((t.geometry for t in ov.temps), temp_offsets, strict=True)] if borrows else []
    return Placement(tuple(o is not None for o in offsets), tuple(spans), view_runs(arena),
                     view_runs(buffer_geometry), buffer_nbytes, view_runs(temps),
                     ov.temp_bytes if borrows else 0, borrows)


class Deliveries:
    """One executor's choice, backward by backward, of where gradients go."""

    def __init__(self, alignment: int):
        self.alignment = alignment
        self._placements: dict[tuple, Placement] = {}

    def target(self, variant: Any, slot: Slot, outputs: Any, drop: Any) -> Target:
        """Where this backward's gradients go; ``drop(stale)`` forgets graphs that wrote an
        output buffer that has moved."""
        d = variant.deliver
        placed = self._placement(variant, slot) if self._in_arena(variant, slot) else None
        variant.region.release_outputs(slot.params, placed is not None, drop)
        if placed is None:
            nbytes, runs = d.nbytes, d.runs
        else:
            outputs = variant.region.outputs_for(slot.params, placed=True)
            nbytes, runs = placed.buffer_nbytes, placed.buffer_runs
        buffer = None
        if nbytes or placed is None:
            buffer = aliased(outputs, nbytes, variant.device, drop)
        if placed is None:
            return Target(buffer, None, outputs.generation, runs)
        arena = _torch.storage_alias(slot.arena.data_ptr(), variant.device, slot.nbytes)
        slot.lend(arena, placed.arena_spans)
        return Target(buffer, arena, outputs.generation if buffer is not None else -1, runs,
                      placed)

    @staticmethod
    def _in_arena(variant: Any, slot: Slot) -> bool:
        """Whether this backward may write gradients into its slot's arena: its saved bytes
        are read by nothing after it (no retain_graph, no saved-tensor hooks at its forward),
        and the loop has shown it drops gradients before the next forward."""
        return (variant.deliver.overlay is not None and variant.region.grads_in_arena()
                and not slot.watched and not _torch.keep_graph())

    def _placement(self, variant: Any, slot: Slot) -> Placement | None:
        key = (slot.layout.key, slot.nbytes)
        placed = self._placements.get(key)
        if placed is None:
            placed = self._placements[key] = place_grads(variant.deliver, slot.layout,
                                                         slot.nbytes, self.alignment)
            state.counters["grad_bytes_in_arena"] += placed.arena_bytes
            state.counters["temp_bytes_in_arena"] += placed.temp_bytes
            log.info("%s: %d of %d gradients (%d bytes) go into saved bytes of the slot's "
                     "arena its backward has finished reading; %d bytes to the output buffer; "
                     "%d of %d temporaries' bytes there too", variant.name,
                     sum(placed.in_arena), len(placed.in_arena), placed.arena_bytes,
                     placed.buffer_nbytes, placed.temp_bytes,
                     variant.deliver.overlay.at(slot.layout.values).temp_bytes)
        return placed if any(placed.in_arena) else None


def warm_up(variant: Any, key: Any, gm: Any, gargs: list[Any], kept: Any) -> Any:
    """A graph's uncaptured first run (``gm`` on ``gargs``); the gradients autograd may keep
    as .grad (outputs ``kept``) go to one new buffer. The delivering backward of ATen kernels
    computes them there, so they are never held twice: copied there after the backward, they
    were, at its end, and llama-small's warm-up peaked 0.16 GiB above its steady state for it
    (H200 run 29c). Where that would peak higher (``Deliver.warm_up``: a backward whose own
    peak comes before its gradients, which the buffer would sit beside), and for gradients the
    twin does not deliver, they are copied (``compact_grads``)."""
    d = variant.deliver
    if kept and d is not None and key.delivers != -1:  # Inductor's twin, delivering as it warms
        # up: those are in the region's output buffer, compact already (copied again, they
        # were held twice at the end of llama-large's warm-up, 0.92 GiB: H200 run 40b)
        kept = tuple(i for i in kept if i not in d.outputs)
    if (not kept or d is None or not d.warm_up or key.delivers != -1
            or torch.is_grad_enabled()):  # create_graph=True: they join a graph
        return compact_grads(gm(*gargs), kept)
    views = fresh_views(d.nbytes, d.runs, variant.device)
    if views is None:
        return compact_grads(gm(*gargs), kept)
    outs = variant.runner(key.direction, deliver=True)(*gargs, *views)
    return compact_grads(outs, tuple(i for i in kept if i not in d.outputs))
