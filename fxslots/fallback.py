"""The one place a graph that cannot use slots falls back: warn (or raise), and count it."""

from __future__ import annotations

import warnings

from . import state
from .errors import UnsupportedGraphError


def fall_back(reason: str, strict: bool) -> None:
    """Report that a graph runs without slots because of ``reason``; raises in strict mode."""
    state.counters["fallbacks"] += 1
    msg = f"fxslots: this graph runs without slots: {reason}"
    if strict:
        raise UnsupportedGraphError(msg + " (strict=True)")
    warnings.warn(msg + " (set strict=True to make this an error)", stacklevel=3)


def run_uncaptured(reason: str, strict: bool) -> None:
    """Report that a graph keeps its slots but runs without CUDA graphs because of ``reason``;
    raises in strict mode."""
    state.counters["uncaptured_graphs"] += 1
    msg = f"fxslots: this graph runs without CUDA graphs (its slots stay): {reason}"
    if strict:
        raise UnsupportedGraphError(msg + " (strict=True)")
    warnings.warn(msg + " (set strict=True to make this an error)", stacklevel=3)
