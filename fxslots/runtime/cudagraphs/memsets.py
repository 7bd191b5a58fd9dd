"""Small memset nodes of a captured CUDA graph, rewritten as kernel nodes writing the same bytes.

Why: cuDNN's attention and ATen's split reductions issue a 4-byte memset before their kernel,
and in a CUDA graph each becomes a memset node. On an H100 (runs 49 and 50) a memset node costs
a chain of small kernels about 0.8 us more than a kernel doing the same write, and it waits
behind host-to-device copies running on other streams: a chain of them ran 1.110x beside 40 MiB
of reloads, where a fill kernel in their place ran 1.006x. Rewritten as kernel nodes, the same
chain ran 0.862x with no copies and 0.866x beside the reloads. Offload's reloads are such copies.

How: the graph is captured with ``keep_graph=True``; before it is instantiated, each memset node
of at most ``MAX_BYTES`` is replaced by a kernel node (one PTX kernel, loaded once per device
through the CUDA driver) with the same dependencies and dependents. Each swap is all or nothing:
a failure destroys the new node, so the memset stays as captured and nothing writes twice.
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from ... import state
from .memset_kernel import PTX

log = logging.getLogger(__name__)

MAX_BYTES = 2**20
"""Larger memsets stay memset nodes: the kernel writes one element per thread, which suits the
few bytes the fixed cost is about, not a bulk clear (those run as memsets either way)."""
THREADS = 256
MEMSET_NODE = 2  # CU_GRAPH_NODE_TYPE_MEMSET
DEVICE_ORDINAL = 9  # CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL


class _MemsetParams(ctypes.Structure):  # CUDA_MEMSET_NODE_PARAMS
    _fields_ = [("dst", ctypes.c_uint64), ("pitch", ctypes.c_size_t), ("value", ctypes.c_uint),
                ("elementSize", ctypes.c_uint), ("width", ctypes.c_size_t),
                ("height", ctypes.c_size_t)]


class _KernelParams(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS (v1, cuGraphAddKernelNode's)
    _fields_ = [("func", ctypes.c_void_p), ("gridDimX", ctypes.c_uint),
                ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint),
                ("blockDimZ", ctypes.c_uint), ("sharedMemBytes", ctypes.c_uint),
                ("kernelParams", ctypes.POINTER(ctypes.c_void_p)),
                ("extra", ctypes.POINTER(ctypes.c_void_p))]


@dataclass(frozen=True)
class Memset:
    """One memset node's write: ``height`` rows of ``width`` elements of ``element_size``
    bytes, each element ``value``, rows ``pitch`` bytes apart from ``dst``."""

    dst: int
    pitch: int
    value: int
    element_size: int
    width: int
    height: int

    @property
    def nbytes(self) -> int:
        return self.element_size * self.width * self.height


@dataclass(frozen=True)
class Launch:
    """The kernel node that writes a ``Memset``'s bytes: ``blocks`` x ``THREADS`` threads, one
    element each, and the kernel's arguments in its parameter order."""

    blocks: int
    args: tuple[int, int, int, int, int, int]  # dst, pitch, value, element size, width, count


def launch(m: Memset) -> Launch | str:
    """The kernel node writing ``m``, or why ``m`` stays a memset node."""
    if m.element_size not in (1, 2, 4):
        return f"its elements are {m.element_size} bytes (the kernel writes 1, 2 or 4)"
    if m.nbytes > MAX_BYTES:
        return f"it writes {m.nbytes} bytes (more than {MAX_BYTES})"
    if m.dst % m.element_size or (m.height > 1 and m.pitch % m.element_size):
        return f"its {m.element_size}-byte elements are not aligned (a kernel's store would be)"
    count = m.width * m.height
    if count == 0:
        return "it writes nothing"
    # A one-row memset may leave its pitch 0: rows past the first never exist then.
    return Launch(blocks=-(-count // THREADS),
                  args=(m.dst, m.pitch, m.value, m.element_size, m.width, count))


class DriverError(RuntimeError):
    """A CUDA driver call refused: its name and CUresult."""


class UnsafeGraph(RuntimeError):
    """A swap failed half way and could not be undone: a kernel node may write beside the
    memset it was to replace, unordered with some of its readers. The graph must never run
    (``CudaCapturer.capture`` drops it and captures again, memsets as they come)."""


class Graphs(Protocol):
    """What ``as_kernels`` asks of a graph API (the driver's, ``_Driver``; a stand-in in CPU
    tests): nodes are opaque ints."""

    def nodes(self, graph: int) -> list[int]: ...
    def memset(self, node: int) -> Memset | None: ...  # None: not a memset node
    def dependencies(self, node: int) -> list[int]: ...
    def dependents(self, node: int) -> list[int]: ...
    def add_kernel(self, graph: int, how: Launch, after: list[int]) -> int: ...
    def add_edge(self, graph: int, before: int, after: int) -> None: ...
    def destroy(self, node: int) -> None: ...


def as_kernels(raw_graph: int, device_index: int) -> tuple[int, str | None]:
    """Swap each small memset node of the captured, not yet instantiated graph ``raw_graph``
    (``CUDAGraph.raw_cuda_graph()``) for a kernel node; (how many, why the rest could not be,
    or None). The device's context must be current."""
    api = driver(device_index)
    if isinstance(api, str):
        return 0, api
    return swap_memsets(api, raw_graph)


def swap_memsets(api: Graphs, graph: int) -> tuple[int, str | None]:
    """``as_kernels`` over any graph API, one memset at a time: a refused one stays a memset
    node (its swap undone; ``UnsafeGraph`` where that fails) and the rest are still tried."""
    try:
        nodes = api.nodes(graph)
    except Exception as e:  # noqa: BLE001 - a refusal (or a bug here) must not stop training
        return 0, f"its nodes could not be listed ({type(e).__name__}: {e})"
    swapped, refused = 0, []
    for node in nodes:
        try:
            swapped += _swap(api, graph, node)
        except UnsafeGraph:
            raise
        except Exception as e:  # noqa: BLE001 - as above: this memset stays as captured
            refused.append(f"{type(e).__name__}: {e}")
    if not refused:
        return swapped, None
    return swapped, (f"{len(refused)} memset node(s) could not be swapped (the first: "
                     f"{refused[0]})")


def release(raw_graph: int, device_index: int) -> int:
    """Destroy every node of a kept graph once it is instantiated: the instantiation no longer
    reads it, and its nodes would hold about 2 KB of host memory each until the ``CUDAGraph``
    dies (run 51c). torch destroys the empty graph with the ``CUDAGraph``. How many nodes
    were destroyed."""
    api = driver(device_index)
    return 0 if isinstance(api, str) else empty(api, raw_graph)


def empty(api: Graphs, graph: int) -> int:
    """``release`` over any graph API. A refusal leaves the rest for torch to free with the
    graph: only memory is at stake, never what a replay runs."""
    destroyed = 0
    try:
        for node in api.nodes(graph):
            api.destroy(node)
            destroyed += 1
    except Exception as e:  # noqa: BLE001 - a graph kept whole is only host memory
        log.debug("memsets: a kept graph keeps its nodes after %d (%s: %s)", destroyed,
                  type(e).__name__, e)
    return destroyed


def _swap(api: Graphs, graph: int, node: int) -> int:
    """1 if ``node`` was a small memset node, now a kernel node in its place; else 0."""
    m = api.memset(node)
    how = launch(m) if m is not None else "not a memset"
    if isinstance(how, str):
        return 0
    before, after = api.dependencies(node), api.dependents(node)
    new = api.add_kernel(graph, how, before)
    try:
        for o in after:
            api.add_edge(graph, new, o)
        api.destroy(node)
    except BaseException as failure:
        # With its edges: the memset node, still there, does it all; nothing writes twice.
        try:
            api.destroy(new)
        except Exception as e:
            raise UnsafeGraph(f"memset node {node:#x}: {failure}; the kernel node replacing "
                              f"it could not be removed again ({e})") from None
        raise
    return 1


class _Driver:
    """``Graphs`` over libcuda, with the memset kernel loaded into the current context."""

    _SIGNATURES = {
        "cuModuleLoadData": ("P", "s"), "cuModuleGetFunction": ("P", "P", "s"),
        "cuGraphGetNodes": ("P", "P", "P"), "cuGraphNodeGetType": ("P", "P"),
        "cuGraphMemsetNodeGetParams": ("P", "P"), "cuGraphNodeGetDependencies": ("P", "P", "P"),
        "cuGraphNodeGetDependentNodes": ("P", "P", "P"),
        "cuGraphAddKernelNode": ("P", "P", "P", "z", "P"),
        "cuGraphAddDependencies": ("P", "P", "P", "z"), "cuGraphDestroyNode": ("P",),
        "cuPointerGetAttribute": ("P", "i", "Q")}

    def __init__(self, device: int) -> None:
        self.device = device
        self.lib = ctypes.CDLL("libcuda.so.1")
        kinds = {"P": ctypes.c_void_p, "s": ctypes.c_char_p, "z": ctypes.c_size_t,
                 "i": ctypes.c_int, "Q": ctypes.c_uint64}
        for name, sig in self._SIGNATURES.items():
            getattr(self.lib, name).argtypes = [kinds[k] for k in sig]
        module, self.fn = ctypes.c_void_p(), ctypes.c_void_p()
        self("cuModuleLoadData", ctypes.byref(module), PTX.encode())
        self("cuModuleGetFunction", ctypes.byref(self.fn), module, b"fxslots_memset")

    def __call__(self, name: str, *args: Any) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            raise DriverError(f"{name} returned CUresult {rc}")

    def _list(self, query: str, of: int) -> list[int]:
        n = ctypes.c_size_t(0)
        self(query, of, None, ctypes.byref(n))
        if n.value == 0:  # the driver refuses an array where there is nothing to list
            return []
        found = (ctypes.c_void_p * n.value)()
        self(query, of, found, ctypes.byref(n))
        return [found[i] for i in range(n.value)]

    def nodes(self, graph: int) -> list[int]:
        return self._list("cuGraphGetNodes", graph)

    def dependencies(self, node: int) -> list[int]:
        return self._list("cuGraphNodeGetDependencies", node)

    def dependents(self, node: int) -> list[int]:
        return self._list("cuGraphNodeGetDependentNodes", node)

    def memset(self, node: int) -> Memset | None:
        kind = ctypes.c_int()
        self("cuGraphNodeGetType", node, ctypes.byref(kind))
        if kind.value != MEMSET_NODE:
            return None
        p = _MemsetParams()
        self("cuGraphMemsetNodeGetParams", node, ctypes.byref(p))
        if self._ordinal(p.dst) != self.device:
            return None  # another device's bytes (or host memory): the memset does it
        return Memset(p.dst, p.pitch, p.value, p.elementSize, p.width, p.height)

    def _ordinal(self, address: int) -> int | None:
        """The device whose memory ``address`` is in; None where the driver cannot say."""
        found = ctypes.c_int(-1)
        rc = self.lib.cuPointerGetAttribute(ctypes.byref(found), DEVICE_ORDINAL,
                                           ctypes.c_uint64(address))
        return found.value if rc == 0 else None

    def add_kernel(self, graph: int, how: Launch, after: list[int]) -> int:
        types = (ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32,
                 ctypes.c_uint64, ctypes.c_uint64)
        values = [t(v) for t, v in zip(types, how.args, strict=True)]
        pointers = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        params = _KernelParams(self.fn, how.blocks, 1, 1, THREADS, 1, 1, 0, pointers, None)
        new = ctypes.c_void_p()
        deps = (ctypes.c_void_p * max(len(after), 1))(*after)
        self("cuGraphAddKernelNode", ctypes.byref(new), graph, deps, len(after),
             ctypes.byref(params))
        return new.value

    def add_edge(self, graph: int, before: int, after: int) -> None:
        self("cuGraphAddDependencies", graph, (ctypes.c_void_p * 1)(before),
             (ctypes.c_void_p * 1)(after), 1)

    def destroy(self, node: int) -> None:
        self("cuGraphDestroyNode", node)


def driver(device_index: int) -> Graphs | str:
    """The graph API with ``device_index``'s memset kernel (loaded at its first capture), or
    why there is none: kept either way, so a failed load is not tried again at every capture."""
    found = state.memset_kernels.get(device_index)
    if found is None:
        try:
            found = _Driver(device_index)
        except Exception as e:  # noqa: BLE001 - no libcuda, an old one, a refused module
            found = f"the CUDA driver could not load the memset kernel ({e})"
        state.memset_kernels[device_index] = found
    return found
