"""Where a delivering backward writes the gradients it hands out: the region's output buffer
(``staging.OutputBuffer``), or saved bytes of its slot's arena it has finished reading
(``fxslots.overlay``), the rest still in the buffer; and where it computes its large
temporaries: in the pool, or in those bytes too, where each of them finds some. Where a
delivering forward writes its outputs: its slot's output buffer (``forward_buffer``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from ... import _torch, state
from ..layout import make_views, pack, view_runs
from ..ring import Slot
from ..variant import BORROWS, IN_ARENA
from .staging import compact_grads, fresh_views

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
    ov = deliver.overlay
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
        if placed is None:
            nbytes, runs = d.nbytes, d.runs
        else:
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
                     variant.deliver.overlay.temp_bytes)
        return placed if any(placed.in_arena) else None


def forward_buffer(variant: Any, slot: Slot, warm: bool, drop: Any) -> tuple[Any, int]:
    """The alias of the slot's output buffer this forward writes its large outputs into
    (``Variant.deliver_forward``) and the buffer's generation; (None, -1): they are copied out
    of the pool. Not before the forward has warmed up (``warm``: the plain graph's kernels warm
    up both, with no buffer held), nor into outputs the caller still holds: of the slot's two
    buffers (``staging.OutputBanks``), the first it holds nothing of; where it holds both, the
    plain graph serves that call. After ``HELD_LIMIT`` of those, no more for that slot: a loop
    that keeps outputs longer would keep capturing, and the buffers would sit beside them."""
    d = variant.deliver_forward
    banks = variant.region.outputs_of_slot(slot.index) if d is not None and warm else None
    if banks is None or not banks.delivering:
        return None, -1
    buffer = banks.next_free()
    if buffer is None:
        if not banks.delivering:
            log.info("%s: the caller kept the outputs of slot %d past two of its forwards %d "
                     "times; they are copied out from now on", variant.name, slot.index,
                     banks.held)
            banks.free()
        return None, -1
    alias = aliased(buffer, d.nbytes, variant.device, drop)
    return alias, buffer.generation


class Tangents:
    """Where one executor's backwards stage their tangents, at addresses that stay put from
    replay to replay: the slot's output buffer (``tangent_buffer``) or the region's staging
    buffer; their views built once per place and shapes."""

    def __init__(self, region: Any, alignment: int) -> None:
        self.region, self.alignment = region, alignment
        self.views: dict[tuple, list[torch.Tensor]] = {}  # by (place, the tangents' shapes)
        self._packed: dict[tuple, tuple] = {}  # (geometry, nbytes) by the tangents' shapes

    def stage(self, variant: Any, slot: Slot, args: list[Any], tangents: list[int],
              drop: Any) -> tuple[list[Any], int]:
        """``args`` with the tangents (at ``tangents``) copied to their place, and the place:
        the generation of the slot's output buffer, or -1, the staging buffer."""
        shapes = tuple((args[i].dtype, tuple(args[i].shape), args[i].stride()) for i in tangents)
        packed = self._packed.get(shapes)
        if packed is None:
            packed = self._packed[shapes] = pack(shapes, self.alignment)
        bank = tangent_buffer(variant, slot, packed[1], drop)
        # staging generations count from 0, output buffers' from 1: one key space
        at = bank.generation if bank is not None else -1 - self.region.staging.generation
        views = self.views.get((at, shapes))
        if views is None:  # over an alias of the bank: not a hand-out that would hold it
            if len(self.views) >= 64:  # bounded: places of moved buffers never come back
                self.views.clear()
            views = self.views[(at, shapes)] = (
                self.region.staging.views(*packed, variant.device) if bank is None else
                make_views(_torch.storage_alias(bank.tensor.data_ptr(), variant.device,
                                                packed[1]), variant.device, packed[0]))
        gargs = list(args)
        _torch.foreach_copy_(views, [args[i] for i in tangents])
        for i, view in zip(tangents, views, strict=True):
            gargs[i] = view
        return gargs, -1 if bank is None else bank.generation


def tangent_buffer(variant: Any, slot: Slot, nbytes: int, drop: Any) -> Any:
    """The output buffer of ``slot`` where its backward stages ``nbytes`` of tangents, or None
    (the region's staging buffer). A forward that delivers its outputs there has a buffer the
    tangents fit (a tangent has its output's shape) and, once the caller let go of what was
    handed out of it, nothing reads it until the slot's next forward writes it; so the staging
    buffer, as large as the tangents and idle outside a backward, is never allocated: heavy's
    64 MiB (H200 run 33a). Where the caller holds the output through its backward
    (``out = model(x); loss = f(out); loss.backward()``), the slot's other buffer serves: that
    loop holds ``out`` through the next forward too, which writes the other buffer anyway
    (``staging.OutputBanks``), so the two buffers are all it costs, as eager holds an output and
    its gradient. It is allocated for tangents alone only in a ring of one slot, where it costs
    what the staging buffer would; with more slots that is one per slot against one per region.
    Once the staging buffer exists, every backward stays there: one graph, not one per place."""
    d = variant.deliver_forward
    banks = variant.region.outputs_of_slot(slot.index) if d is not None else None
    if (banks is None or not banks.delivering or nbytes > d.nbytes
            or variant.region.staging.tensor is not None):
        return None
    buffer = banks.unheld()
    if buffer is None or (buffer.tensor is None and variant.region.ring.options.slots > 1
                          and any(b.tensor is not None for b in banks.banks)):
        return None
    _moving(buffer, drop, lambda: buffer.ensure(d.nbytes, variant.device))
    return buffer


def prepare_hint(region: Any, key: Any) -> str:
    """What ``prepare`` call would have captured the graph of ``key`` up front."""
    second = region.outputs_of_slot(key.slot).banks[1].generation  # 0: none yet
    if second and second in (key.delivers, key.tangents_in):
        return ("the loop holds an output through its backward or the next forward, and "
                "fxslots.prepare(model, examples, hold_outputs=True) captures the graphs of "
                "such a loop up front")
    return ("fxslots.prepare(model, examples) captures every shape up front (with "
            "in_flight=True, microbatches in flight as a GPipe pass holds them)")


def aliased(buffer: Any, nbytes: int, device: Any, drop: Any) -> Any:
    """``buffer.alias(nbytes)``, dropping the graphs of its old generation where it moved."""
    return _moving(buffer, drop, lambda: buffer.alias(nbytes, device))


def _moving(buffer: Any, drop: Any, act: Any) -> Any:
    """``act()``; where that moved ``buffer``, ``drop`` forgets the graphs that deliver into
    its old generation or read tangents there (in every executor: ``GraphExecutor.
    _drop_everywhere``). Generations are unique across buffers (``staging._generations``): no
    graph that writes another buffer (the other of a slot's two, a forward's beside a
    backward's) is dropped."""
    old = buffer.generation
    result = act()
    if buffer.generation != old:
        drop(lambda k: old in (k.delivers, k.tangents_in))
    return result


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
