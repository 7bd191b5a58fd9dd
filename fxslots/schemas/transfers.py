"""The types of offload scheduling (``passes/offload.py``), part of ``fxslots.schemas``."""

from __future__ import annotations

import itertools
from dataclasses import dataclass


@dataclass(frozen=True)
class Transfers:
    """Where one graph's host<->device copies meet the compute stream: in a forward, the node
    each device-to-host copy is joined before; in a backward, the node each reload is issued
    before, and (``joined``) the node each reload is joined before. Positions index the graph's
    nodes as they were before any transfer node went in. Transfers joined at one node share
    one wait, the last one's: a side stream's copies end in order. ``held`` names the
    transfers placed against the link's own timing (joined earlier, stalling compute; issued
    later) to keep at most ``window`` device bytes in transfer or reloaded.

    Invariants: positions never decrease (one side stream per direction: copies end, and
    reloads are issued, in order); the window is positive; ``held`` indexes ``at``, ascending;
    ``joined`` is empty (a forward) or one position per reload, none before its issue.
    """

    at: tuple[int, ...]
    window: int
    held: tuple[int, ...] = ()
    joined: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        assert self.window > 0, self.window
        assert all(a <= b for a, b in itertools.pairwise(self.at)), self.at
        assert list(self.held) == sorted(set(self.held)), self.held
        assert all(0 <= i < len(self.at) for i in self.held), (self.held, self.at)
        assert not self.joined or (len(self.joined) == len(self.at) and all(
            a <= j for a, j in zip(self.at, self.joined, strict=True))), (self.at, self.joined)
        assert all(a <= b for a, b in itertools.pairwise(self.joined)), self.joined

    def __str__(self) -> str:  # the pass's log line
        joins = set(self.joined) if self.joined else set(self.at)
        return (f"{len(self.at)} transfers placed, {len(self.held)} of them moved to keep a "
                f"{self.window}-byte window, joined at {len(joins)} points")
