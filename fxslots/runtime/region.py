"""A compiled region: what every variant (shape, recompile) of one Dynamo frame shares."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

from ..options import Options
from .cudagraphs.staging import OutputBuffer, StagingBuffer
from .ring import SlotRing


@dataclass(eq=False)
class Region:
    """The slot ring of one region and the buffers its backward replays share (staged inputs,
    handed-out gradients). Variants hold it; ``fxslots.state.regions`` only points at it."""

    ring: SlotRing
    staging: StagingBuffer = field(default_factory=StagingBuffer)
    outputs: OutputBuffer = field(default_factory=OutputBuffer)
    variants: list = field(default_factory=list)  # weak references to its Variants
    noted_capture: bool = False  # logged that a capture happened outside fxslots.prepare
    _anchors: dict[int, weakref.ref] = field(default_factory=dict)

    @classmethod
    def new(cls, name: str, options: Options) -> "Region":
        return cls(SlotRing(name, options))

    def live_variants(self) -> list:
        return [v for v in (r() for r in self.variants) if v is not None]

    def anchor(self, obj: Any) -> None:
        """Free the memory once ``obj`` (a parameter of the compiled model) and every other
        anchor have died: Dynamo keeps compiled code (and so this region) after the model is
        gone, but nothing can run on the slots of a model that no longer exists."""
        key = id(obj)
        if key in self._anchors:
            return
        region = weakref.ref(self)

        def died(_: Any, key: int = key) -> None:
            r = region()
            if r is not None and r._anchors.pop(key, None) is not None and not r._anchors:
                r.free()

        self._anchors[key] = weakref.ref(obj, died)

    def free(self) -> None:
        """Give back every byte no microbatch holds, and the graphs that point at them."""
        self.ring.free()
        self.staging.free()
        self.outputs.free()
