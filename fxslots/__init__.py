"""fxslots: a torch.compile backend that keeps saved activations in slot arenas.

``torch.compile(model, backend="fxslots", options={"slots": 2})`` needs no import of this
package: the backend is found through the ``torch_dynamo_backends`` entry point.
"""

from __future__ import annotations

from typing import Any

from . import state
from .errors import (
    ArenaLimitError,
    CaptureError,
    FxslotsError,
    OptionsError,
    SlotsExhaustedError,
    UnsupportedGraphError,
)
from .options import Options
from .prepare import Prepared, prepare
from .report import Report, explain

counters = state.counters
"""Process-wide event counts: compiles, fallbacks, captures, capture_failures..."""


def reset() -> None:
    """Forget every compiled graph (Dynamo's caches too) and free every slot arena, captured
    graph and graph pool fxslots holds: a fresh start."""
    import torch

    torch.compiler.reset()
    state.reset()


def regions() -> list[Any]:
    """The live compiled regions, for inspection: each has ``ring`` (its slots, their arenas
    and owners), ``staging`` and ``live_variants()`` (plan, layouts, executor)."""
    return list(state.regions.values())


__all__ = [
    "ArenaLimitError",
    "CaptureError",
    "FxslotsError",
    "Options",
    "OptionsError",
    "Prepared",
    "Report",
    "SlotsExhaustedError",
    "UnsupportedGraphError",
    "counters",
    "explain",
    "prepare",
    "regions",
    "reset",
]
