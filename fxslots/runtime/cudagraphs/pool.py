"""The shared CUDA graph pool of each device, and capturing into it safely.

Every fxslots graph on a device is captured into one private memory pool, so the scratch of
all variants and slots is shared. A pool lives while a graph captured in it does: the allocator
frees a private pool once its last graph dies, and a handle used after that trips an internal
assert (``use_count > 0``), so when the last graph goes the handle is forgotten and the next
capture opens a fresh pool. Nothing here runs at import time.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import weakref
from typing import Any, Sequence

import torch
import torch.fx as fx
from torch.torch_version import TorchVersion

from ... import _torch, state
from ...errors import gist
from ...fallback import go_without
from ...options import Options
from . import memsets

log = logging.getLogger(__name__)


class SharedPool:
    """One device's pool handle and the number of live graphs captured in it."""

    def __init__(self, index: int):
        self.index = index
        self.handle = torch.cuda.graph_pool_handle()
        self.graphs = 0
        self.room = 0  # bytes of the largest segment make_room made

    def track(self, graph: Any) -> None:
        self.graphs += 1
        weakref.finalize(graph, self._graph_died)

    def _graph_died(self) -> None:
        self.graphs -= 1
        if self.graphs == 0:
            self.free()

    def make_room(self, nbytes: int, device: torch.device) -> None:
        """Inside a capture into this pool: one segment of ``nbytes``, freed at once, for this
        capture's blocks and later captures' to be cut from (``room.room_for`` says why and how
        large). Skipped where it would take more than half the device's free memory."""
        if nbytes <= self.room or 2 * nbytes > torch.cuda.mem_get_info(device)[0]:
            return
        try:
            torch.empty(nbytes, dtype=torch.uint8, device=device)
        except torch.OutOfMemoryError:  # the capture goes on, its blocks cut as they come
            log.info("pool: no room of %.1f MiB on %s (out of memory)", nbytes / 2**20, device)
            return
        self.room = nbytes
        log.info("pool: a %.1f MiB segment made for the captures on %s to share", nbytes / 2**20,
                 device)

    def free(self) -> None:
        """Never hand this handle out again (graphs still captured in it keep working)."""
        if state.pools.get(self.index) is self:
            del state.pools[self.index]


def shared_pool(device: torch.device) -> SharedPool:
    index = device_index(device)
    pool = state.pools.get(index)
    if pool is None:
        pool = state.pools[index] = SharedPool(index)
    return pool


def device_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


class NodeTracker(fx.Interpreter):
    """Runs a graph node by node, remembering the node in flight (to name a capture failure)."""

    current: fx.Node | None = None

    def run_node(self, n: fx.Node) -> Any:
        self.current = n
        return super().run_node(n)


class _Call:
    """NodeTracker's interface over compiled code: one call, no node in flight."""

    current: fx.Node | None = None

    def __init__(self, fn: Any):
        self.fn, self.env = fn, {}

    def run(self, *args: Any) -> Any:
        return self.fn(*args)


class CaptureFailed(Exception):
    """A capture failed at ``node`` (None: before the first node) because of ``cause``; the
    device, its stream, allocator and pool are usable again."""

    def __init__(self, node: fx.Node | None, cause: BaseException):
        super().__init__(node, cause)
        self.node, self.cause = node, cause

    def where(self, compiled: bool) -> str:
        """Where it failed, for a message; ``compiled``: the graph ran as one call of code."""
        if self.node is not None:
            return f"node {self.node.name} ({self.node.target})"
        return "a call of Inductor's code (no node to name)" if compiled else "its start"


class CudaCapturer:
    """Captures FX graphs as CUDA graphs into the shared pool of one device; with
    ``memsets="kernels"``, each graph's small memset nodes become kernel nodes before it is
    instantiated (``memsets.as_kernels``)."""

    def __init__(self, device: torch.device, options: Options | None = None):
        self.device = device
        self.options = options or Options()

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def capture(self, gm: fx.GraphModule | Any, args: list[Any], room: int = 0
                ) -> tuple[Any, Any]:
        """(graph, outputs) of one capture of ``gm`` on ``args``, in a pool with a segment of
        at least ``room`` bytes (``SharedPool.make_room``); or CaptureFailed, raised
        after everything the failed capture allocated is freed and its state undone. ``gm``
        may be compiled code (Inductor's), run as one call: then no node is named. With
        ``memsets="kernels"`` a graph whose rewrite fails (the driver refusing to instantiate
        it, a swap it could not undo) is dropped unrun and captured again as it comes."""
        if self.options.memsets == "kernels":
            graph, outs = self._capture(gm, args, True, room)
            try:
                swapped = self._instantiate(graph)
            except Exception as e:  # noqa: BLE001 - the rewrite must never stop training
                drop_frames(e)
                del graph, outs  # never instantiated, never replayed; its outputs die too
                self._report(0, f"the rewritten graph was dropped ({type(e).__name__}: "
                                f"{gist(e)}) and captured again")
            else:
                self._report(*swapped)
                return graph, outs
        return self._capture(gm, args, False, room)

    def _capture(self, gm: Any, args: list[Any], keep: bool, room: int) -> tuple[Any, Any]:
        self.synchronize()
        graph = torch.cuda.CUDAGraph(keep_graph=keep)
        register_generators(graph, args, self.device)
        tracker = NodeTracker(gm) if isinstance(gm, fx.GraphModule) else _Call(gm)
        pool = shared_pool(self.device)
        stream = torch.cuda.current_stream(self.device)
        try:
            with capturing(graph, pool.handle):
                pool.make_room(room, self.device)
                outs = tracker.run(*args)
        except Exception as e:  # noqa: BLE001 - any failure to capture is reported the same way
            # Whatever the failed capture allocated must die now: the interpreter's values and
            # every traceback frame that still points at them.
            tracker.env = {}
            drop_frames(e)
            del graph
            recover(self.device, pool, stream, args)
            raise CaptureFailed(tracker.current, root_cause(e)) from None
        tracker.env = {}  # the interpreter keeps its values: this forward's slot views
        pool.track(graph)
        return graph, outs

    def _instantiate(self, graph: torch.cuda.CUDAGraph) -> tuple[int, str | None]:
        """Instantiate a graph captured with ``keep_graph=True``, its memsets made kernels
        first, and empty what was kept: (how many swaps, why not all, or None)."""
        index = device_index(self.device)
        with torch.cuda.device(index):  # the kernel's module is the device context's
            raw = graph.raw_cuda_graph()
            found = memsets.as_kernels(raw, index)
            graph.instantiate()
            state.counters["kept_graph_nodes_released"] += memsets.release(raw, index)
        return found

    def _report(self, swapped: int, reason: str | None) -> None:
        state.counters["memsets_as_kernels"] += swapped
        log.info("memsets: %d memset nodes of the graph captured on %s made kernel nodes",
                 swapped, self.device)
        if reason is not None:
            go_without(f"memset nodes as kernel nodes on {self.device}: {reason}; they stay "
                       f"memset nodes (options={{'memsets': 'nodes'}} keeps them so without "
                       f"trying)", self.options.strict)


# torch 2.14 ties a generator to a capture at its first use there and makes the explicit call a
# deprecated no-op that warns (pytorch PR 176753, which drops it from CUDA graph trees too)
LAZY_GENERATORS = TorchVersion(torch.__version__) >= (2, 14)


def register_generators(graph: torch.cuda.CUDAGraph, args: Sequence[Any],
                        device: torch.device) -> None:
    """Register with ``graph`` the generators among its arguments: activation checkpointing
    hands each checkpointed random op's forward and backward a generator of their own (graph-
    safe RNG functionalization, on by default on CUDA), and a random op drawing from one must
    find it registered, so that each replay reads its current seed and offset and advances it
    (a replay draws fresh numbers; the backward's recompute draws what its forward drew), as
    CUDA graph trees do (``CUDAGraphNode._record``) before torch 2.14."""
    if LAZY_GENERATORS:
        return
    with torch.cuda.device(device):
        for generator in (a for a in args if isinstance(a, torch.Generator)):
            graph.register_generator_state(generator)


@contextlib.contextmanager
def capturing(graph: torch.cuda.CUDAGraph, handle: Any):
    """Capture into ``handle``'s pool the way CUDA graph trees do, so nothing outside this
    thread's own work can spoil it: other threads' CUDA calls are allowed ("thread_local"), the
    garbage collector cannot run finalizers (freeing tensors, destroying graphs) in the middle,
    and cuBLAS takes a fresh workspace from the pool, accounted there as scratch, instead of one
    a warm-up left outside it."""
    enabled = gc.isenabled()
    gc.disable()
    _torch.clear_cublas_workspaces()
    try:
        with torch.cuda.graph(graph, pool=handle, capture_error_mode="thread_local"):
            yield
    finally:
        _torch.clear_cublas_workspaces()
        if enabled:
            gc.enable()


def recover(device: torch.device, pool: SharedPool, stream: torch.cuda.Stream,
            args: Sequence[Any] = ()) -> None:
    """Undo what a capture that failed inside ``capture_end`` (an invalidated capture: a host
    sync, say) left behind, since ``torch.cuda.graph``'s exit stops at that error: the current
    stream, the allocator's routing into the shared pool and, on torch versions that keep one
    capture flag per RNG generator, that flag, of the default generator and of the ones among
    ``args`` the capture registered. A capture that completes on the pool, with them registered,
    proves it usable again and clears the flags; where the pinned host allocator (no Python hook)
    still counts the pool as recording (always, on torch 2.11: run 62b), the pool is retired
    (its graphs keep working, new ones get a fresh pool) and a private capture clears the flags."""
    torch.cuda.set_stream(stream)
    index = device_index(device)
    _torch.end_allocate_to_pool(index, pool.handle)
    try:
        probe = torch.cuda.CUDAGraph()
        register_generators(probe, args, device)
        with torch.device(device), torch.cuda.graph(probe, pool=pool.handle):
            torch.zeros(1).add_(1)
        pool.track(probe)  # its death may be the pool's last graph: then the handle goes
        del probe
    except RuntimeError as e:
        torch.cuda.set_stream(stream)
        _torch.end_allocate_to_pool(index, pool.handle)
        log.warning("fxslots: the failed capture left the shared CUDA graph pool unusable (%s); "
                    "later graphs go to a new pool", gist(e))
        pool.free()
        end_rng_capture(device, args)
    torch.cuda.synchronize(device)


def end_rng_capture(device: torch.device, args: Sequence[Any] = ()) -> None:
    """Take the device's default RNG generator, and the generators among ``args``, out of
    capture mode. A capture that fails inside
    ``capture_end`` never reaches the generator's capture epilogue, and on torch 2.11 every
    random op outside a graph then raises "Offset increment outside graph capture encountered
    unexpectedly" (seen on the H200: dropout after a failed capture). Any capture that completes
    ends it; this one goes to a private pool, freed with the graph."""
    try:
        probe = torch.cuda.CUDAGraph()
        register_generators(probe, args, device)
        with torch.cuda.device(device), torch.cuda.graph(probe):
            torch.zeros(1, device=device)
        del probe
    except RuntimeError as e:
        log.warning("fxslots: after the failed capture, random ops on %s may fail outside CUDA "
                    "graphs (%s)", device, gist(e))


def _exception_chain(e: BaseException | None):
    """``e``, then what it was raised from or during, back to the first exception."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def root_cause(e: BaseException) -> BaseException:
    *_, root = _exception_chain(e)
    return root


def drop_frames(e: BaseException | None) -> None:
    for x in _exception_chain(e):
        x.__traceback__ = None
