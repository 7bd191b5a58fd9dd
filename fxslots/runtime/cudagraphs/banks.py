"""A slot's output buffers (``staging.OutputBanks``): where a delivering forward writes the
large outputs it hands out (``forward_buffer``), and where its backward stages its tangents
(``Tangents``), at addresses that stay put from replay to replay."""

from __future__ import annotations

import logging
from typing import Any

import torch

from ... import _torch, state
from ..layout import make_views, pack
from ..ring import Slot
from ..variant import Direction
from .staging import aliased, moving

log = logging.getLogger(__name__)
SHAPES_NOTED = 50  # distinct shapes one variant captures before the warning (as torch's)


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
    moving(buffer, drop, lambda: buffer.ensure(d.nbytes, variant.device))
    return buffer


def note_capture(region: Any, name: str, key: Any, shapes: set) -> None:
    """Warn, once per region, of a capture while training (outside ``prepare``; not a backward
    now writing gradients into the arena: the loop chose that), with the ``prepare`` call that
    would have captured it up front; and once per variant, of the ``SHAPES_NOTED``-th distinct
    input shape its forwards were captured at (``shapes``)."""
    if key.direction is Direction.FORWARD and key.shape not in shapes:
        shapes.add(key.shape)
        if len(shapes) == SHAPES_NOTED:
            log.warning("fxslots: %s has captured CUDA graphs for %d distinct input shapes; "
                        "each costs a capture of its forward and backward and graphs the "
                        "process keeps. Pad inputs to a few sizes (buckets), or set "
                        "options={'cudagraphs': False} where shapes keep changing", name,
                        len(shapes))
    if state.preparing or region.noted_capture or key.overlay:
        return
    region.noted_capture = True
    log.warning("fxslots: %s captured a CUDA graph for a shape or slot it had not seen (%s) "
                "while training; %s", name, key.direction.value, _prepare_hint(region, key))


def _prepare_hint(region: Any, key: Any) -> str:
    """What ``prepare`` call would have captured the graph of ``key`` up front."""
    second = region.outputs_of_slot(key.slot).banks[1].generation  # 0: none yet
    if second and second in (key.delivers, key.tangents_in):
        return ("the loop holds an output through its backward or the next forward, and "
                "fxslots.prepare(model, examples, hold_outputs=True) captures the graphs of "
                "such a loop up front")
    return ("fxslots.prepare(model, examples) captures every shape up front (with "
            "in_flight=True, microbatches in flight as a GPipe pass holds them)")
