"""One saved tensor per arena: what a replayed forward hands AOTAutograd in place of the dozens
of saved tensors in its slot, and how its backward gets them back.

A replayed forward hands autograd the same arena token for every saved tensor in one arena
(``cudagraphs.outputs``). AOTAutograd still handles each one at every call (a version-counter
check, a saved variable, an unpack in the backward: ~0.4 us each on the dev CPU, more on the
H200), though the replayed backward reads none of them. Its runtime splits a forward's outputs
by counts from both ends and hands the backward what was saved, in order; so a replayed forward
hands over one token per arena, and its backward, seeing the shorter argument list, puts the
token back at every saved position. Forwards that hand out views (first runs, saved-tensor
hooks) hand over all of them, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..errors import FxslotsError
from ..passes.rewrite import slot_tensors
from ..schemas import ArenaPlan, SavedSet, Write


@dataclass(frozen=True)
class Collapse:
    """Which forward outputs a replayed forward leaves out, and the backward's way back.

    Invariants: ``expand`` has one entry per backward argument, each an index below ``short``;
    every left-out output has a kept output of its arena before it (its token)."""

    members: frozenset[tuple[int, bool]]  # (forward output, in the host arena) in the arenas
    dropped: frozenset[int]  # forward outputs left out: all but the first of each arena
    short: int  # the backward's argument count when they were left out
    expand: tuple[int, ...]  # for each backward argument, its index in the shorter list

    def __post_init__(self) -> None:
        assert all(0 <= i < self.short for i in self.expand), self
        assert len(self.expand) - self.short == len(self.dropped), self

    def backward_args(self, args: list[Any]) -> list[Any]:
        """The backward's arguments as its graph takes them: every saved position filled,
        whether or not the forward left some out (told by the count)."""
        if len(args) == self.short:
            return [args[i] for i in self.expand]
        if len(args) != len(self.expand):  # never run a graph on shifted arguments
            raise FxslotsError(
                f"fxslots: a backward got {len(args)} arguments where its graph takes "
                f"{len(self.expand)} ({self.short} when its forward handed over one token per "
                f"arena): AOTAutograd's calling convention in torch {torch.__version__} is not "
                f"the one fxslots knows. Please report this")
        return args


def plan_collapse(arenas: list[list[tuple[int, int]]], host: set[int], n_backward: int,
                  fixed: int) -> Collapse | None:
    """The collapse for saved tensors grouped by arena, each ``(forward output, backward
    argument)``; ``host``: the outputs in the host arena; ``n_backward``: the backward's
    argument count; ``fixed``: the last forward output AOTAutograd's runtime reads by position
    (none may be left out up to it). None where nothing would be left out, or where the saved
    tensors' order differs between forward outputs and backward arguments (leaving some out
    would then shift the others)."""
    pairs = sorted(p for members in arenas for p in members)
    # AOTAutograd lists saved tensors in one order on both sides today (collect.match_backward
    # numbers them so); a layout where it did not would shift the kept ones
    if [b for _, b in pairs] != sorted(b for _, b in pairs):
        return None
    dropped: dict[int, int] = {}  # backward argument left out -> its arena's token's
    dropped_out: set[int] = set()
    for members in arenas:
        first, *rest = sorted(members) or [None]
        for j, b in rest:
            dropped[b] = first[1]
            dropped_out.add(j)
    if not dropped or min(dropped_out) <= fixed:
        return None
    kept = [b for b in range(n_backward) if b not in dropped]
    index = {b: i for i, b in enumerate(kept)}
    return Collapse(frozenset((j, j in host) for j, _ in pairs), frozenset(dropped_out),
                    len(kept), tuple(index[dropped.get(b, b)] for b in range(n_backward)))


def collapse_of(saved: SavedSet, plan: ArenaPlan, n_backward: int, fixed: int) -> Collapse | None:
    """``plan_collapse`` for a variant's saved tensors in its slot: those its producer or a
    copy writes in the device arena, staged inputs there, and offloaded ones in the host
    arena."""
    device, host = [], []
    for t in slot_tensors(saved, plan):
        if t.output_index >= 0 and t.backward_index >= 0:
            offloaded = plan.placement(t.group).write is Write.OFFLOAD
            (host if offloaded else device).append((t.output_index, t.backward_index))
    return plan_collapse([device, host], {j for j, _ in host}, n_backward, fixed)
