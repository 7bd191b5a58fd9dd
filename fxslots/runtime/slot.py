"""One slot of a ring (``ring.SlotRing``): an in-flight microbatch's arenas, who holds them,
and what its forward left for its backward."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .. import _torch, state
from ..errors import CaptureError


@dataclass
class Slot:
    """One in-flight microbatch's memory: a flat byte arena, reused by every variant."""

    index: int
    device: torch.device
    arena: torch.Tensor | None = None
    host_arena: torch.Tensor | None = None  # offloaded groups; pinned when the device is CUDA
    owner: Any = None  # weak reference to the alias storage of the forward holding the slot
    host_owner: Any = None  # the same for the host arena
    variant: str | None = None
    microbatch: int | None = None
    generation: int = 0  # bumps whenever the arenas move (captured graphs go stale)
    layout: Any = None  # the ViewLayout of the forward holding the slot
    # Which parameters that forward ran with (its anchor parameter's address): one compiled
    # graph can serve several modules (a pipeline rank's chunks), each its own captures.
    params: int = 0
    # Set when that forward handed autograd arena tokens, not views (cudagraphs.outputs): the
    # saved outputs' (index, kind, geometry), for a backward that must rebuild the views.
    saved_outs: Any = None
    watched: bool = False  # saved-tensor hooks saw that forward's saved tensors
    retained: bool = False  # its backward ran with retain_graph=True: the graph holds it
    kept: Any = None  # released after watched: (owner, host_owner), what a hook may still view
    node: Any = None  # weak reference to that forward's autograd node, where it was found
    # Gradients its last backward wrote into saved bytes it had finished reading (fxslots
    # .overlay): the weak reference of the alias they are handed out through, and their bytes.
    lent: Any = None
    lent_spans: tuple[tuple[int, int], ...] = ()

    @property
    def nbytes(self) -> int:
        return 0 if self.arena is None else self.arena.numel()

    @property
    def host_nbytes(self) -> int:
        return 0 if self.host_arena is None else self.host_arena.numel()

    def pending(self) -> bool:
        o, h = self.owner, self.host_owner  # no generator: every forward asks every slot
        return (o is not None and not o.expired()) or (h is not None and not h.expired())

    def orphaned(self) -> bool:
        """Pending, though the autograd node of its forward holds no saved tensors any more:
        what keeps its views lives outside autograd (compiled autograd keeps the inputs of each
        backward it traces), and nothing will read them as this slot's."""
        return self.pending() and self.node is not None and _torch.saved_released(self.node)

    def kept_viewed(self) -> bool:
        """Whether views of the aliases of its last released forward live on: a saved-tensor
        hook kept what it packed past the backward (``kept``), and nothing may write them."""
        return self.kept is not None and any(o is not None and not o.expired() for o in self.kept)

    def lent_out(self) -> bool:
        """Whether gradients someone still uses live in its arena: no forward may write it."""
        return self.lent is not None and not self.lent.expired()

    def lend(self, alias: Any, spans: tuple[tuple[int, int], ...]) -> None:
        """``alias`` views this arena for the caller: the arena lives as long (an eviction, the
        region's death or ``fxslots.reset()`` only drop the slot's hold on it)."""
        self.lent, self.lent_spans = _torch.StorageWeakRef(alias), spans
        state.keep_while_viewed(self.arena, self.lent)

    def check_held(self) -> None:
        """Debug mode, before every replay: the slot is held by exactly one live microbatch."""
        if not self.pending():
            raise CaptureError(
                f"fxslots debug: replaying into slot {self.index}, which no live microbatch "
                f"holds (last holder: microbatch {self.microbatch} of {self.variant})")

    def contains(self, t: torch.Tensor) -> bool:
        """Whether ``t``'s bytes start inside one of the arenas."""
        ptr = t.untyped_storage().data_ptr()
        return any(a is not None and a.data_ptr() <= ptr < a.data_ptr() + a.numel()
                   for a in (self.arena, self.host_arena))

    def owns(self, t: torch.Tensor) -> bool:
        return self.holds(_torch.storage_cdata(t))

    def holds(self, cdata: int) -> bool:
        return any(o is not None and cdata == o.cdata for o in (self.owner, self.host_owner))
