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
from typing import Any

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


class _Driver:
    """libcuda's graph calls this module makes, and the memset kernel loaded per device."""

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

    def __call__(self, name: str, *args: Any) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            raise DriverError(f"{name} returned CUresult {rc}")

    def kernel(self) -> ctypes.c_void_p:
        """The memset kernel in the current context (the capturing device's)."""
        module, fn = ctypes.c_void_p(), ctypes.c_void_p()
        self("cuModuleLoadData", ctypes.byref(module), _PTX.encode())
        self("cuModuleGetFunction", ctypes.byref(fn), module, b"fxslots_memset")
        return fn

    def nodes(self, query: str, of: Any) -> list[int]:
        """The nodes ``query`` lists (a graph's, a node's dependencies or dependents)."""
        n = ctypes.c_size_t(0)
        self(query, of, None, ctypes.byref(n))
        if n.value == 0:  # the driver refuses an array where there is nothing to list
            return []
        found = (ctypes.c_void_p * n.value)()
        self(query, of, found, ctypes.byref(n))
        return [found[i] for i in range(n.value)]


def driver_kernel(device_index: int) -> tuple[_Driver, ctypes.c_void_p] | str:
    """The driver and the memset kernel of ``device_index`` (loaded at its first capture), or
    why there are none: kept, so a failure is reported once, not at every capture."""
    found = state.memset_kernels.get(device_index)
    if found is None:
        try:
            driver = _Driver()
            found = (driver, driver.kernel())
        except (OSError, AttributeError, DriverError) as e:
            found = f"the CUDA driver could not load the memset kernel ({e})"
        state.memset_kernels[device_index] = found
    return found


def as_kernels(raw_graph: int, device_index: int) -> tuple[int, str | None]:
    """Swap each small memset node of the captured, not yet instantiated graph ``raw_graph``
    (``CUDAGraph.raw_cuda_graph()``) for a kernel node; (how many, why the rest could not be,
    or None). The device's context must be current."""
    found = driver_kernel(device_index)
    if isinstance(found, str):
        return 0, found
    driver, fn = found
    graph = ctypes.c_void_p(raw_graph)
    swapped = 0
    try:
        for node in driver.nodes("cuGraphGetNodes", graph):
            swapped += _swap(driver, fn, graph, ctypes.c_void_p(node))
    except (DriverError, ctypes.ArgumentError) as e:
        return swapped, f"a memset node could not be swapped ({e})"
    return swapped, None


def _swap(driver: _Driver, fn: ctypes.c_void_p, graph: ctypes.c_void_p,
          node: ctypes.c_void_p) -> int:
    """1 if ``node`` was a small memset node, now a kernel node in its place; else 0."""
    kind = ctypes.c_int()
    driver("cuGraphNodeGetType", node, ctypes.byref(kind))
    if kind.value != MEMSET_NODE:
        return 0
    p = _MemsetParams()
    driver("cuGraphMemsetNodeGetParams", node, ctypes.byref(p))
    how = launch(Memset(p.dst, p.pitch, p.value, p.elementSize, p.width, p.height))
    if isinstance(how, str):
        return 0
    before = driver.nodes("cuGraphNodeGetDependencies", node)
    after = driver.nodes("cuGraphNodeGetDependentNodes", node)
    new = _add_kernel(driver, fn, graph, how, before)
    try:
        for o in after:
            driver("cuGraphAddDependencies", graph, (ctypes.c_void_p * 1)(new.value),
                   (ctypes.c_void_p * 1)(o), 1)
    except DriverError:
        driver("cuGraphDestroyNode", new)  # with its edges: the memset node still does it all
        raise
    driver("cuGraphDestroyNode", node)
    return 1


def _add_kernel(driver: _Driver, fn: ctypes.c_void_p, graph: ctypes.c_void_p, how: Launch,
                before: list[int]) -> ctypes.c_void_p:
    types = (ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32,
             ctypes.c_uint64, ctypes.c_uint64)
    values = [t(v) for t, v in zip(types, how.args, strict=True)]
    pointers = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
    params = _KernelParams(fn, how.blocks, 1, 1, THREADS, 1, 1, 0, pointers, None)
    new = ctypes.c_void_p()
    deps = (ctypes.c_void_p * max(len(before), 1))(*before)
    driver("cuGraphAddKernelNode", ctypes.byref(new), graph, deps, len(before),
           ctypes.byref(params))
    return new
