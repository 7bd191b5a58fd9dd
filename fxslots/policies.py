"""Policies: small named callables an option selects by name."""

from __future__ import annotations

from . import _torch

PARTITIONERS = {
    # Saves few tensors and recomputes cheap ones (views, pointwise) in backward: the default.
    "min_cut": _torch.min_cut_rematerialization_partition,
    # Saves every forward value the backward reads, views included, exactly as traced.
    "default": _torch.default_partition,
}
