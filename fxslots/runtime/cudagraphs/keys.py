"""What a captured graph is valid for."""

from __future__ import annotations

from typing import Iterable, NamedTuple

from ..variant import Direction


class CaptureKey(NamedTuple):
    """What a captured graph is valid for: the memory it points at and the shapes it ran. A
    named tuple, not a frozen dataclass: two are built and hashed at every step, at half the
    cost."""

    direction: Direction
    slot: int
    generation: int  # of the slot's arenas
    staging: int  # generation of the staging buffer (backward only)
    shape: tuple  # the symbol values, and for backward the tangents' shapes
    accumulate: bool = False  # the backward that adds into .grad buffers itself
    # The graph that writes its results into this generation of their output buffer itself
    # (a backward its gradients, the region's; a forward its outputs, its slot's); -1: they
    # are copied out
    delivers: int = -1
    params: int = 0  # the parameters it ran with (ring.Slot.params)
    overlay: int = 0  # it writes gradients (IN_ARENA), temporaries too (BORROWS) into its
    # slot's arena (cudagraphs.delivery)
    # An accumulating backward once gradients go into arenas: where each .grad buffer is (in
    # an arena or the output buffer, as the step's first backward placed it; prepare captures
    # each way). Only the first address let two layouts share a key (session 15).
    grads_at: tuple[int, ...] = ()
    # A backward that reads its tangents in this generation of its slot's output buffer
    # (banks.tangent_buffer); -1: in the region's staging buffer
    tangents_in: int = -1


def moved_grads(keys: Iterable[CaptureKey], key: CaptureKey, nargs: int,
                layouts: int) -> tuple[CaptureKey | None, int]:
    """Before ``key`` is captured: the oldest of ``keys`` that differ from it only in where
    .grad lies, once ``layouts`` of them exist (where .grad may lie: in any slot's arena, as the
    step's first backward placed it, or in the output buffer; a loop that gives .grad new
    memory makes more, whose graphs add into buffers it let go: drop it, and count a
    recapture), and the argument of the first .grad that moved (the ``.grad`` buffers are the
    last of the ``nargs`` arguments); else (None, -1)."""
    if not key.grads_at:
        return None, -1
    same = [k for k in keys if k.grads_at and k._replace(grads_at=key.grads_at) == key]
    if len(same) < layouts:
        return None, -1
    old = same[0]  # a dict's keys come oldest first
    moved = next((j for j, (a, b) in enumerate(zip(old.grads_at, key.grads_at)) if a != b), 0)
    return old, nargs - len(key.grads_at) + moved
