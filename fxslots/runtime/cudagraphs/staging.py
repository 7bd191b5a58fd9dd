"""Device buffers a region's backward replays share: where they stage their inputs, and where
they copy the gradients they hand out."""

from __future__ import annotations

import weakref
from typing import Any, Callable

import torch

from ... import _torch, state
from ..layout import Geometry, make_views


class StagingBuffer:
    """Device bytes at a stable address for the tangents and reloaded groups of backward
    replays. One per region, shared by its variants: backward replays run one at a time and
    consume what they stage before the next one stages. Listeners hear when it moves."""

    def __init__(self) -> None:
        self.tensor: torch.Tensor | None = None
        self.generation = 0
        self._listeners: list[weakref.WeakMethod] = []

    def subscribe(self, listener: Callable[[], None]) -> None:
        self._listeners.append(weakref.WeakMethod(listener))

    def views(self, geometry: list[Geometry], nbytes: int,
              device: torch.device) -> list[torch.Tensor]:
        if self.tensor is None or self.tensor.numel() < nbytes or self.tensor.device != device:
            self._moved()
            self.tensor = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=device)
        return make_views(self.tensor.untyped_storage(), device, geometry)

    def free(self) -> None:
        if self.tensor is not None:
            self._moved()

    def _moved(self) -> None:
        self.tensor = None  # free it before a bigger one is allocated
        self.generation += 1
        self._listeners = [w for w in self._listeners if w() is not None]
        for w in self._listeners:
            w()()


# After this many times the caller still held the gradients of one backward when the next
# came (each a new buffer, and a capture), a region's backwards stop delivering gradients into
# it (passes/deliver.py) and copy them out instead.
HELD_LIMIT = 2


class OutputBuffer:
    """Device bytes where a region's backward replays copy the gradients they hand out.

    Reused once nothing holds the last ones (a training loop drops them at
    ``zero_grad(set_to_none=True)``), so the ``.grad`` buffers autograd adopts keep their
    addresses from step to step, and a backward that adds into them (captured with those
    addresses) replays instead of capturing again. Handed out as views of a fresh alias, whose
    weak reference tells when the last one died; a buffer still held when the next backward
    comes is retired (``state.viewed`` keeps it alive until its views die) and a new one made.
    """

    def __init__(self) -> None:
        self.tensor: torch.Tensor | None = None
        self.generation = 0  # a new tensor, at a new address: graphs that write it are stale
        self.held = 0  # how often one was retired because the caller still held it
        self._owner = None

    def alias(self, nbytes: int, device: torch.device):
        if self._owner is not None and not self._owner.expired():
            self.tensor = None
            self.held += 1
        if self.tensor is None or self.tensor.numel() < nbytes or self.tensor.device != device:
            self.tensor = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=device)
            self.generation += 1
        alias = _torch.storage_alias(self.tensor.data_ptr(), device, max(nbytes, 1))
        self._owner = _torch.StorageWeakRef(alias)
        state.keep_while_viewed(self.tensor, self._owner)
        return alias

    @property
    def delivering(self) -> bool:
        """Whether backwards may still write gradients into it themselves."""
        return self.held <= HELD_LIMIT

    def free(self) -> None:
        self.tensor = None  # what the caller still views stays alive (state.viewed)


def copy_staged(stage: tuple[tuple[int, torch.Tensor], ...], args: list[Any]) -> None:
    """One multi-tensor copy of each staged argument into its staging view. The view keeps the
    argument's strides; along a dimension both expand (stride 0, a broadcast attention mask)
    one slice is copied, since copy_ refuses a destination whose elements overlap."""
    if not stage:
        return
    dsts, srcs = [], []
    for i, dst in stage:
        src = args[i]
        if 0 in dst.stride():
            for dim, (a, b) in enumerate(zip(dst.stride(), src.stride(), strict=True)):
                if a == 0 and b == 0:
                    dst, src = dst.narrow(dim, 0, 1), src.narrow(dim, 0, 1)
        dsts.append(dst)
        srcs.append(src)
    _torch.foreach_copy_(dsts, srcs)
