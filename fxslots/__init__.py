"""fxslots: a torch.compile backend that keeps saved activations in slot arenas.

``torch.compile(model, backend="fxslots", options={"slots": 2})`` needs no import of this
package: the backend is found through the ``torch_dynamo_backends`` entry point.
"""

from .errors import (
    ArenaLimitError,
    CaptureError,
    FxslotsError,
    OptionsError,
    SlotsExhaustedError,
    UnsupportedGraphError,
)
from .options import Options
from .report import Report, explain


def reset() -> None:
    """Forget every compiled graph and slot ring (and Dynamo's caches): a fresh start."""
    import torch

    from . import backend

    torch.compiler.reset()
    backend._rings.clear()
    backend.counters.clear()

__all__ = [
    "ArenaLimitError",
    "CaptureError",
    "FxslotsError",
    "Options",
    "OptionsError",
    "Report",
    "SlotsExhaustedError",
    "UnsupportedGraphError",
    "explain",
    "reset",
]
