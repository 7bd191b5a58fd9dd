"""The device buffer where backward replays stage their inputs."""

from __future__ import annotations

import weakref
from typing import Callable

import torch

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
