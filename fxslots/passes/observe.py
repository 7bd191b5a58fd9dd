"""The one observer every pass runs through: it times the pass, logs one line of what it did,
and at DEBUG level dumps the graph before and after."""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, TypeVar

import torch.fx as fx

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
    result = fn(*args, **kwargs)
    ms = (time.perf_counter() - t0) * 1e3
    log.info("%s: %s (%.1f ms)", name, summary(result), ms)
    if graph is not None and log.isEnabledFor(logging.DEBUG):
        log.debug("%s: graph after\n%s", name, format_graph(graph))
    return result
