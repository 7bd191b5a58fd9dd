"""Policies: small named callables an option selects by name."""

from __future__ import annotations

from typing import Any, Callable

import torch

from . import _torch

PARTITIONERS = {
    # Saves few tensors and recomputes cheap ones (views, pointwise) in backward: the default.
    "min_cut": _torch.min_cut_rematerialization_partition,
    # Saves every forward value the backward reads, views included, exactly as traced.
    "default": _torch.default_partition,
}


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
