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
from dataclasses import dataclass
from typing import Any, Protocol

from ... import state

MAX_BYTES = 2**20
"""Larger memsets stay memset nodes: the kernel writes one element per thread, which suits the
few bytes the fixed cost is about, not a bulk clear (those run as memsets either way)."""
THREADS = 256
MEMSET_NODE = 2  # CU_GRAPH_NODE_TYPE_MEMSET

_PTX = r"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry fxslots_memset(.param .u64 p_dst, .param .u64 p_pitch, .param .u32 p_value,
                               .param .u32 p_esize, .param .u64 p_width, .param .u64 p_n)
{
  .reg .u64 %rd<12>;
  .reg .u32 %r<8>;
  .reg .u16 %rs<2>;
  .reg .pred %p<4>;
  ld.param.u64 %rd1, [p_dst];
  ld.param.u64 %rd2, [p_pitch];
  ld.param.u32 %r1, [p_value];
  ld.param.u32 %r2, [p_esize];
  ld.param.u64 %rd3, [p_width];
  ld.param.u64 %rd4, [p_n];
  mov.u32 %r3, %ctaid.x;
  mov.u32 %r4, %ntid.x;
  mov.u32 %r5, %tid.x;
  mul.wide.u32 %rd5, %r3, %r4;
  cvt.u64.u32 %rd6, %r5;
  add.u64 %rd5, %rd5, %rd6;
  setp.ge.u64 %p1, %rd5, %rd4;
  @%p1 bra DONE;
  div.u64 %rd7, %rd5, %rd3;
  rem.u64 %rd8, %rd5, %rd3;
  cvt.u64.u32 %rd9, %r2;
  mul.lo.u64 %rd8, %rd8, %rd9;
  mad.lo.u64 %rd10, %rd7, %rd2, %rd8;
  add.u64 %rd10, %rd10, %rd1;
  cvt.u16.u32 %rs1, %r1;
  setp.eq.u32 %p2, %r2, 4;
  @%p2 bra E4;
  setp.eq.u32 %p3, %r2, 2;
  @%p3 bra E2;
  st.global.u8 [%rd10], %rs1;
  bra DONE;
E2:
  st.global.u16 [%rd10], %rs1;
  bra DONE;
E4:
  st.global.u32 [%rd10], %r1;
DONE:
  ret;
}
"""


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
    memset it was to replace, unordered with some of its readers. The graph must not run (the
    capture fails, as any other does)."""


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
    """``as_kernels`` over any graph API: stops at the first failure, every swap before it
    done, the failing one undone (``UnsafeGraph`` where it cannot be)."""
    swapped = 0
    try:
        for node in api.nodes(graph):
            swapped += _swap(api, graph, node)
    except UnsafeGraph:
        raise
    except Exception as e:  # noqa: BLE001 - a refusal (or a bug here) must not stop training
        return swapped, f"a memset node could not be swapped ({type(e).__name__}: {e})"
    return swapped, None


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
    except BaseException:
        # With its edges: the memset node, still there, does it all; nothing writes twice.
        try:
            api.destroy(new)
        except Exception as e:
            raise UnsafeGraph(f"a kernel node replacing memset node {node:#x} could not be "
                              f"removed again after a failure ({e})") from e
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
        "cuGraphAddDependencies": ("P", "P", "P", "z"), "cuGraphDestroyNode": ("P",)}

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        kinds = {"P": ctypes.c_void_p, "s": ctypes.c_char_p, "z": ctypes.c_size_t}
        for name, sig in self._SIGNATURES.items():
            getattr(self.lib, name).argtypes = [kinds[k] for k in sig]
        module, self.fn = ctypes.c_void_p(), ctypes.c_void_p()
        self("cuModuleLoadData", ctypes.byref(module), _PTX.encode())
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
        return Memset(p.dst, p.pitch, p.value, p.elementSize, p.width, p.height)

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
    why there is none: kept, so a failure is reported once, not at every capture."""
    found = state.memset_kernels.get(device_index)
    if found is None:
        try:
            found = _Driver()
        except Exception as e:  # noqa: BLE001 - no libcuda, an old one, a refused module
            found = f"the CUDA driver could not load the memset kernel ({e})"
        state.memset_kernels[device_index] = found
    return found
