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


class PassError(FxslotsError):
    """A pass could not handle a graph: names the pass, the node and the cause.

    The backend turns it into the documented fallback (the graph runs without slots, with a
    warning; raised as UnsupportedGraphError only with strict=True). It never reaches a user's
    training loop otherwise.
    """

    def __init__(self, node: str | None, cause: str, pass_name: str | None = None):
        super().__init__(node, cause)
        self.node = node
        self.cause = cause
        self.pass_name = pass_name  # filled in by the observer that ran the pass

    def __str__(self) -> str:
        at = f" at node {self.node}" if self.node else ""
        return f"{self.pass_name or 'a pass'} failed{at}: {self.cause}"


def gist(error: BaseException) -> str:
    """The line of ``error``'s message a one-line warning shows: its first, and where that only
    introduces what follows (Inductor's "An exception occurred in a subprocess:"), its last."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if not lines:
        return ""
    return f"{lines[0]} ... {lines[-1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]


def failure_reason(e: BaseException) -> str:
    """The fallback reason for a failure inside the passes: the pass, the node, the cause."""
    if isinstance(e, PassError):
        return str(e)
    return f"{type(e).__name__} while compiling: {e}"
