"""How much room the shared CUDA graph pool makes before a variant's first capture
(``SharedPool.make_room``): the most bytes any of a model's graphs holds at once, by its nodes.

The caching allocator gives a block that fits no free one a segment of its own, sized to it, and
never joins two: llama-large's forward took a 500 MiB segment for its logits that the backward's
1000 MiB block could not use (H100 run 54e, pool 1758 MiB). Made first, one segment that large
serves both captures (run 56d: 1036 MiB). Nothing here runs at import time.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

import torch.fx as fx

from ... import _torch
from ...passes.lifetimes import allocated_peak
from ..variant import BORROWS, Direction

log = logging.getLogger(__name__)


def room_for(variants: Any) -> int:
    """The room to make for the captures of ``variants`` (ATen kernels; a model's variants
    known so far, so that one room serves all of them): the most bytes the forward or the
    backward a warm loop captures of any of them holds at once by its nodes, at every shape
    the variant has run at (``lifetimes.allocated_peak``; a variant of symbolic sizes was
    compiled at one, its shape hints; the forward that writes large outputs into the slot's output
    buffer where it has one), plus the cuBLAS workspace and the allocator's 2 MiB rounding.
    Inductor's code is not counted: its allocations are not its nodes'; nor variants whose
    options say ``pool_room=False``."""
    largest = _largest(variants)
    return 0 if largest is None else largest[0] + slack()


def slack() -> int:
    """Bytes a capture holds beyond its nodes' values: cuBLAS's workspace, 2 MiB of rounding."""
    return _torch.cublas_workspace_bytes() + 2**21


def describe_room(variants: Any) -> str | None:
    """What ``fxslots.explain`` says of the room ``variants`` would get, or None: none."""
    largest = _largest(variants)
    if largest is None:
        return None
    peak, what = largest
    return (f"room: {(peak + slack()) / 2**20:.1f} MiB, one segment made inside the first "
            f"capture for every capture to cut its blocks from: {what} holds "
            f"{peak / 2**20:.1f} MiB at once by its nodes, plus {slack() / 2**20:.1f} MiB "
            f"(cuBLAS's workspace, rounding)")


def _largest(variants: Any) -> tuple[int, str] | None:
    """(bytes, which graph) of the graph a warm loop captures that holds the most at once, at
    any shape its variant has run at (a variant of symbolic sizes was compiled at one of them,
    and the loop has run the others: each layout it made says one)."""
    try:
        sized = [(_peak(g, values), f"{v.name}'s {what}{_where(values)}") for v in variants
                 if v.ring.options.pool_room for what, g in (
            ("forward", v.runner(Direction.FORWARD, deliver=v.deliver_forward is not None)),
            ("backward", _backward_captured(v))) if isinstance(g, fx.GraphModule)
                 for values in _shapes(v)]
    except Exception as e:  # noqa: BLE001 - a room is memory saved, never worth a failed step
        log.info("pool: no room made: the graphs could not be sized (%s: %s)",
                 type(e).__name__, e)
        return None
    return max(sized, key=lambda s: s[0]) if sized else None


def _shapes(variant: Any) -> list[dict[str, int] | None]:
    """The symbol values of each shape ``variant`` has run at; [None] (its shape hints): none
    of symbolic size yet, or a variant of one shape."""
    return [lay.values for lay in variant.layouts.values() if lay.values] or [None]


def _where(values: dict[str, int] | None) -> str:
    return "" if values is None else " at " + ", ".join(f"{k}={v}" for k, v in values.items())


_PEAKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _peak(gm: fx.GraphModule, values: dict[str, int] | None) -> int:
    """``allocated_peak`` of ``gm`` at one shape, once: each capture asks for every one."""
    peaks = _PEAKS.setdefault(gm, {})
    key = None if values is None else tuple(sorted(values.items()))
    if key not in peaks:
        try:
            peaks[key] = allocated_peak(gm, values)[0]
        except KeyError:  # a size of a symbol the layout does not bind (data-dependent)
            peaks[key] = allocated_peak(gm)[0]
    return peaks[key]


def _backward_captured(variant: Any) -> Any:
    """The backward a warm loop captures: the one that computes temporaries in the slot's
    arena once the loop drops its gradients (``Deliveries._in_arena``), else the one that
    delivers them into a buffer, else the plain one."""
    d = variant.deliver
    if d is not None and d.overlay is not None and d.overlay.graph is not None and (
            variant.region.grads_in_arena()):
        return variant.runner(Direction.BACKWARD, deliver=BORROWS)
    return variant.runner(Direction.BACKWARD, deliver=d is not None)
