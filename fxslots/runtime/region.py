"""A compiled region: what every variant (shape, recompile) of one Dynamo frame shares."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..options import Options
from .cudagraphs.staging import StagingBuffer
from .ring import SlotRing


@dataclass(eq=False)
class Region:
    """The slot ring of one region and the staging buffer of its backward replays. Variants
    hold it; ``fxslots.state.regions`` only points at it."""

    ring: SlotRing
    staging: StagingBuffer = field(default_factory=StagingBuffer)
    variants: list = field(default_factory=list)  # weak references to its Variants

    @classmethod
    def new(cls, name: str, options: Options) -> "Region":
        return cls(SlotRing(name, options))

    def live_variants(self) -> list:
        return [v for v in (r() for r in self.variants) if v is not None]

    def free(self) -> None:
        """Give back every byte no microbatch holds, and the graphs that point at them."""
        self.ring.free()
        self.staging.free()
