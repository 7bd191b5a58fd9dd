"""Errors fxslots raises. Each names the cause and the setting that fixes it."""


class FxslotsError(RuntimeError):
    """Base class of every fxslots error."""


class OptionsError(FxslotsError, ValueError):
    """An unknown or ill-typed option."""


class SlotsExhaustedError(FxslotsError):
    """A forward found every slot still waiting for its backward."""


class ArenaLimitError(FxslotsError):
    """A variant needs more arena bytes than `max_arena_bytes` allows."""


class CaptureError(FxslotsError):
    """A CUDA graph capture failed; the process can keep training."""


class UnsupportedGraphError(FxslotsError):
    """A graph fxslots cannot place in slots (raised in strict mode, else it falls back)."""
