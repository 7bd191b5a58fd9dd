"""What a captured graph is valid for."""

from __future__ import annotations

from typing import NamedTuple

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
