"""Policies: small named callables an option selects by name."""

from __future__ import annotations

from typing import Any, Callable

import sympy
import torch

from . import _torch
from .geometry import evaluate, symbol_values
from .passes.plan import copied_whole
from .schemas import SavedSet, Source

PARTITIONERS = {
    # Saves few tensors and recomputes cheap ones (views, pointwise) in backward: the default.
    "min_cut": _torch.min_cut_rematerialization_partition,
    # Saves every forward value the backward reads, views included, exactly as traced.
    "default": _torch.default_partition,
}


def _offloadable(saved: SavedSet):
    """Groups that may be offloaded: slotted, of one dtype (reloaded as one span), and moved
    by one dense copy (see ``copied_whole``)."""
    out = []
    for g in saved.groups:
        members = [saved.tensor(m) for m in g.members]
        if (g.source is Source.INTERMEDIATE and len({m.dtype for m in members}) == 1
                and copied_whole(g, members, saved.symbol_ranges)):
            out.append(g)
    return out


def _smallest(saved: SavedSet, nbytes: sympy.Expr) -> int:
    """Bytes at the smallest shape the symbols allow (the safe side for a threshold)."""
    if not nbytes.free_symbols <= set(saved.symbol_ranges):
        return 0
    env = next(symbol_values(saved.symbol_ranges, nbytes.free_symbols, points=("low",)))
    return evaluate(nbytes, env)


def offload_none(saved: SavedSet, arg: int | None) -> frozenset[int]:
    """Keep every saved tensor on the device."""
    return frozenset()


def offload_all(saved: SavedSet, arg: int | None) -> frozenset[int]:
    """Move every slotted storage group to the slot's host arena."""
    return frozenset(g.id for g in _offloadable(saved))


def offload_above(saved: SavedSet, arg: int | None) -> frozenset[int]:
    """Move storage groups of at least ``arg`` bytes (small tensors are not worth a copy)."""
    return frozenset(g.id for g in _offloadable(saved) if _smallest(saved, g.nbytes) >= (arg or 0))


OFFLOAD: dict[str, Callable[[SavedSet, int | None], frozenset[int]]] = {
    "none": offload_none,
    "all": offload_all,
    "above": offload_above,  # "above:1048576"
}


def parse_offload(spec: str) -> tuple[str, int | None]:
    """``"above:1048576"`` -> ("above", 1048576); raises ValueError naming the valid forms."""
    name, _, arg = spec.partition(":")
    if name not in OFFLOAD or (name == "above") != bool(arg) or (arg and not arg.isdigit()):
        raise ValueError(
            f"fxslots option 'offload' must be 'none', 'all' or 'above:<bytes>', got {spec!r}")
    return name, int(arg) if arg else None


def choose_offload(spec: str, saved: SavedSet) -> frozenset[int]:
    name, arg = parse_offload(spec)
    return OFFLOAD[name](saved, arg)


def _is_pointwise(node) -> bool:
    tags = getattr(node.target, "tags", ())
    return torch.Tag.pointwise in tags and torch.Tag.nondeterministic_seeded not in tags


RECOMPUTE: dict[str, Callable[[Any], bool]] = {
    # Save what the partitioner chooses.
    "none": lambda node: False,
    # Recompute deterministic pointwise ops (gelu, tanh, mul...) in backward from their inputs
    # instead of saving their outputs: one cheap kernel in backward for a saved tensor less.
    "pointwise": _is_pointwise,
}
