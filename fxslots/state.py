"""Process-wide state of fxslots, all of it in this one module.

What lives here:

- ``counters``: event counts (compiles, fallbacks, captures...), for tests and benchmarks.
- ``recorders``: the lists that open ``fxslots.report.recording()`` blocks collect into.
- ``regions``: every compiled region (a slot ring and what its variants share), held *weakly*.
  A region lives while a compiled variant of it does (Dynamo's code cache holds those).
- ``preparing``: how deep inside ``fxslots.prepare`` this process is.
- ``accumulators``: per parameter (weakly), the regions whose backward graphs may add into its
  ``.grad``, and ``OUTSIDE`` where a backward saw code outside fxslots feed it too;
  ``accumulators_version`` changes whenever a parameter gains or loses a second feeder (those
  backwards may take autograd's path, which sums every contribution before adding it).
- ``inference``: the CUDA graphs of each compiled inference graph, held weakly
  (``runtime.cudagraphs.inference``): they live while Dynamo's code cache holds the graph.
- ``pools``: per CUDA device, the shared graph pool that the region's graphs are captured into;
  a pool lives while a graph captured in it does, then its handle is never used again.
- ``viewed``: memory the caller's tensors view through a non-owning alias (gradients in a
  slot's arena or an output buffer): kept while they live, past their slot, their region and
  ``reset()``, which must not free what a ``.grad`` still points into.
- ``memset_kernels``: per CUDA device, the driver and the kernel that captured graphs' memset
  nodes become (``runtime.cudagraphs.memsets``), or why it could not load; kept past
  ``reset()``: the kernel's module lives as long as the device's context.

Lifecycle: everything is created lazily at the first compile or capture (importing fxslots does
no CUDA work). A region's arenas and graphs are freed when the model it was compiled for dies
(the ring anchors itself to the parameters it sees), or when Dynamo drops the compiled code
(``torch.compiler.reset()``), or at ``reset()`` below, which frees them all at once.

This module imports nothing from fxslots: every other module may import it.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections import Counter
from typing import Any, Iterator, Protocol


class Freeable(Protocol):
    def free(self) -> None: ...


counters: Counter = Counter()
recorders: list[list[Any]] = []
regions: "weakref.WeakValueDictionary[Any, Freeable]" = weakref.WeakValueDictionary()
inference: "weakref.WeakSet[Any]" = weakref.WeakSet()
pools: dict[int, Freeable] = {}
preparing = 0  # > 0 inside fxslots.prepare: captures there are expected, not news
# id(parameter) -> (a weak reference to it, ids of the regions). Not a WeakKeyDictionary:
# it compares keys with ==, which a tensor answers elementwise.
accumulators: dict[int, tuple[Any, set[int]]] = {}
accumulators_version = 0
OUTSIDE = 0  # the feeder id of code outside fxslots (a weight penalty, a tied eager module)
viewed: list[tuple[Any, Any]] = []  # (memory, weak reference of the alias that views it)
memset_kernels: dict[int, Any] = {}


# Rings of different regions (two models trained in two threads) call both below at once: a
# filter that replaced the list under an append would drop memory still viewed.
_viewed_lock = threading.Lock()


def keep_while_viewed(memory: Any, alias_ref: Any) -> None:
    """Keep ``memory`` alive while the storage ``alias_ref`` weakly refers to does."""
    with _viewed_lock:
        _release_unviewed()
        viewed.append((memory, alias_ref))


def release_unviewed() -> None:
    """Drop the memory nothing views any more (called at every forward: cheap when empty)."""
    if viewed:
        with _viewed_lock:
            _release_unviewed()


def _release_unviewed() -> None:
    viewed[:] = [(m, r) for m, r in viewed if not r.expired()]


def accumulator_ref(param: Any) -> Any:
    """A weak reference to ``param`` whose death drops its ``accumulators`` entry (a model
    deleted between experiments leaves none behind)."""
    key = id(param)

    def forget(ref: Any) -> None:
        entry = accumulators.get(key)
        if entry is not None and entry[0] is ref:
            del accumulators[key]

    return weakref.ref(param, forget)


def _feeders(param: Any) -> set[int]:
    entry = accumulators.get(id(param))
    if entry is None or entry[0]() is not param:  # new, or an id reused after a parameter died
        entry = accumulators[id(param)] = (accumulator_ref(param), set())
    return entry[1]


def note_feeder(param: Any, feeder: int) -> None:
    """A region (``feeder``: its id) whose backward graphs may add into ``param``'s ``.grad``."""
    global accumulators_version
    feeders = _feeders(param)
    feeders.add(feeder)
    if len(feeders) == 2:
        accumulators_version += 1


def note_fed_outside(param: Any, fed: bool) -> None:
    """Whether code outside fxslots fed ``param``'s accumulator too in the backward pass last
    watched (``runtime.feeds.Feeds.watch``)."""
    global accumulators_version
    feeders = _feeders(param)  # a first step's may be new: no forward noted it yet
    if (OUTSIDE in feeders) == fed:
        return
    if fed:
        feeders.add(OUTSIDE)
    else:
        feeders.discard(OUTSIDE)
    accumulators_version += 1


@contextlib.contextmanager
def own_regions() -> Iterator[None]:
    """Regions compiled in the block see no others, and none of them outlives it in
    ``regions``: ``fxslots.explain``'s step neither joins a region of an earlier compile
    (Dynamo's reset restarts its frame ids, part of a region's key) nor is joined by a later
    one. What the block compiled lives on while something holds it (the report)."""
    global regions
    outer, regions = regions, weakref.WeakValueDictionary()
    try:
        yield
    finally:
        regions = outer


def record(item: Any) -> Any:
    """Hand ``item`` (what one compile produced) to every open recording."""
    for r in recorders:
        r.append(item)
    return item


def reset() -> None:
    """Free every region's arenas and graphs and every pool now, and zero the counters."""
    for region in list(regions.values()):
        region.free()
    regions.clear()
    for graphs in list(inference):
        graphs.free()
    inference.clear()
    for pool in list(pools.values()):
        pool.free()
    pools.clear()
    counters.clear()
    accumulators.clear()
