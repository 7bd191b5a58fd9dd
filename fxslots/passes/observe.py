"""The one observer every pass runs through: it times the pass, logs one line of what it did,
at DEBUG level dumps the graph before and after, and turns any failure into a PassError that
names the pass and, where known, the node."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any, Callable, Iterator, TypeVar

import torch.fx as fx

from ..errors import PassError, failure_reason  # noqa: F401 - re-exported: passes' API

log = logging.getLogger("fxslots.passes")
T = TypeVar("T")


def observe(name: str, fn: Callable[..., T], *args: Any,
            summary: Callable[[T], str] = lambda r: "done",
            graph: fx.GraphModule | None = None, **kwargs: Any) -> T:
    """Run ``fn(*args, **kwargs)`` as pass ``name``; ``graph``, if given, is dumped around it."""
    from ..printing import format_graph  # printing imports passes; import late

    if graph is not None and log.isEnabledFor(logging.DEBUG):
        log.debug("%s: graph before\n%s", name, format_graph(graph))
    t0 = time.perf_counter()
    try:
        result = fn(*args, **kwargs)
    except PassError as e:
        e.pass_name = e.pass_name or name
        raise
    except Exception as e:  # a bug or an unforeseen graph: the backend falls back on it
        raise PassError(None, f"{type(e).__name__}: {e}", name) from e
    ms = (time.perf_counter() - t0) * 1e3
    log.info("%s: %s (%.1f ms)", name, summary(result), ms)
    if graph is not None and log.isEnabledFor(logging.DEBUG):
        log.debug("%s: graph after\n%s", name, format_graph(graph))
    return result


@contextlib.contextmanager
def at_node(node: str | None) -> Iterator[None]:
    """Name ``node`` in any failure raised inside the block (``observe`` adds the pass)."""
    try:
        yield
    except PassError:
        raise
    except Exception as e:
        raise PassError(node, f"{type(e).__name__}: {e}") from e
