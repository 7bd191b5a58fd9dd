"""H200 run 50 (a prototype, not fxslots code): do memset nodes made kernels stop waiting for
host-to-device copies?

Run 49 (copy_contention.py): a chain of small kernels with a 4-byte memset node before each
ran 1.110x beside 40 MiB of host-to-device side-stream copies, where a fill kernel in the
memset's place ran 1.006x. Here the same memset chain is captured with ``keep_graph=True`` and,
before instantiation, each memset node of the graph is replaced by a kernel node doing the same
memset (a PTX kernel, through the driver's graph API), with the memset's dependencies and
dependents. Checked first on 1-, 2- and 4-byte and 2-D (pitched) memsets, then timed.

    python3 benchmarks/results/h200-run50/memset_kernels.py [--reps 9]
"""

import argparse
import ctypes
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
import copy_contention as cc  # noqa: E402

PTX = r"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry fx_memset(.param .u64 p_dst, .param .u64 p_pitch, .param .u32 p_value,
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


class MemsetParams(ctypes.Structure):
    _fields_ = [("dst", ctypes.c_uint64), ("pitch", ctypes.c_size_t), ("value", ctypes.c_uint),
                ("elementSize", ctypes.c_uint), ("width", ctypes.c_size_t),
                ("height", ctypes.c_size_t)]


class KernelParams(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS (v1)
    _fields_ = [("func", ctypes.c_void_p), ("gridDimX", ctypes.c_uint),
                ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint),
                ("blockDimZ", ctypes.c_uint), ("sharedMemBytes", ctypes.c_uint),
                ("kernelParams", ctypes.POINTER(ctypes.c_void_p)),
                ("extra", ctypes.POINTER(ctypes.c_void_p))]


_CU = ctypes.CDLL("libcuda.so.1")
_FUNC = {}
_P, _S, _U = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint
for _name, _types in {
        "cuModuleLoadData": [_P, ctypes.c_char_p], "cuModuleGetFunction": [_P, _P, ctypes.c_char_p],
        "cuGraphGetNodes": [_P, _P, _P], "cuGraphNodeGetType": [_P, _P],
        "cuGraphMemsetNodeGetParams": [_P, _P], "cuGraphNodeGetDependencies": [_P, _P, _P],
        "cuGraphNodeGetDependentNodes": [_P, _P, _P], "cuGraphAddKernelNode": [_P, _P, _P, _S, _P],
        "cuGraphAddDependencies": [_P, _P, _P, _S], "cuGraphDestroyNode": [_P],
        "cuMemsetD8Async": [ctypes.c_uint64, ctypes.c_ubyte, _S, _P],
        "cuMemsetD16Async": [ctypes.c_uint64, ctypes.c_ushort, _S, _P],
        "cuMemsetD32Async": [ctypes.c_uint64, _U, _S, _P],
        "cuMemsetD2D32Async": [ctypes.c_uint64, _S, _U, _S, _S, _P]}.items():
    getattr(_CU, _name).argtypes = _types


def _check(rc, what):
    if rc != 0:
        raise RuntimeError(f"{what} failed: CUresult {rc}")


def _kernel():
    if "f" not in _FUNC:
        mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
        _check(_CU.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(PTX.encode())),
               "cuModuleLoadData")
        _check(_CU.cuModuleGetFunction(ctypes.byref(fn), mod, b"fx_memset"),
               "cuModuleGetFunction")
        _FUNC["f"] = fn
    return _FUNC["f"]


def _nodes(query, node):
    n = ctypes.c_size_t(0)
    _check(query(node, None, ctypes.byref(n)), "count")
    if n.value == 0:
        return []
    arr = (ctypes.c_void_p * max(n.value, 1))()
    _check(query(node, arr, ctypes.byref(n)), "list")
    return [arr[i] for i in range(n.value)]


def memsets_as_kernels(graph) -> int:
    """Replace every memset node of the CUgraph ``graph`` by a kernel node that writes the same
    bytes, with the same dependencies and dependents. Returns how many."""
    f = _kernel()
    g = ctypes.c_void_p(graph)
    swapped = 0
    for node in _nodes(_CU.cuGraphGetNodes, g):
        kind = ctypes.c_int()
        _check(_CU.cuGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(kind)), "type")
        if kind.value != 2:  # CU_GRAPH_NODE_TYPE_MEMSET
            continue
        p = MemsetParams()
        _check(_CU.cuGraphMemsetNodeGetParams(ctypes.c_void_p(node), ctypes.byref(p)), "params")
        deps = _nodes(_CU.cuGraphNodeGetDependencies, ctypes.c_void_p(node))
        outs = _nodes(_CU.cuGraphNodeGetDependentNodes, ctypes.c_void_p(node))
        n = p.width * p.height
        args = [ctypes.c_uint64(p.dst), ctypes.c_uint64(p.pitch), ctypes.c_uint32(p.value),
                ctypes.c_uint32(p.elementSize), ctypes.c_uint64(p.width), ctypes.c_uint64(n)]
        ptrs = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
        kp = KernelParams(f, (n + 255) // 256, 1, 1, 256, 1, 1, 0, ptrs, None)
        new = ctypes.c_void_p()
        dep_arr = (ctypes.c_void_p * max(len(deps), 1))(*deps)
        _check(_CU.cuGraphAddKernelNode(ctypes.byref(new), g, dep_arr, len(deps),
                                        ctypes.byref(kp)), "cuGraphAddKernelNode")
        for o in outs:
            frm, to = (ctypes.c_void_p * 1)(new.value), (ctypes.c_void_p * 1)(o)
            _check(_CU.cuGraphAddDependencies(g, frm, to, 1), "cuGraphAddDependencies")
        _check(_CU.cuGraphDestroyNode(ctypes.c_void_p(node)), "cuGraphDestroyNode")
        swapped += 1
    return swapped


def check() -> None:
    """Driver memsets of 1, 2 and 4 bytes and a pitched one, captured, swapped, replayed."""
    buf = torch.full((4096,), 7, dtype=torch.uint8, device="cuda")
    stream = lambda: ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)  # noqa: E731
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(g):
        base = buf.data_ptr()
        _check(_CU.cuMemsetD8Async(ctypes.c_uint64(base + 1), ctypes.c_ubyte(0xAB),
                                   ctypes.c_size_t(5), stream()), "D8")
        _check(_CU.cuMemsetD16Async(ctypes.c_uint64(base + 64), ctypes.c_ushort(0x1234),
                                    ctypes.c_size_t(9), stream()), "D16")
        _check(_CU.cuMemsetD32Async(ctypes.c_uint64(base + 256), ctypes.c_uint(0xDEADBEEF),
                                    ctypes.c_size_t(300), stream()), "D32")
        _check(_CU.cuMemsetD2D32Async(ctypes.c_uint64(base + 2048), ctypes.c_size_t(256),
                                      ctypes.c_uint(0x01020304), ctypes.c_size_t(16),
                                      ctypes.c_size_t(4), stream()), "D2D32")
    n = memsets_as_kernels(g.raw_cuda_graph())
    g.instantiate()
    buf.fill_(7)
    g.replay()
    torch.cuda.synchronize()
    want = torch.full((4096,), 7, dtype=torch.uint8)
    want[1:6] = 0xAB
    want[64:82] = torch.tensor([0x34, 0x12] * 9, dtype=torch.uint8)
    want[256:1456] = torch.tensor([0xEF, 0xBE, 0xAD, 0xDE] * 300, dtype=torch.uint8)
    for r in range(4):
        want[2048 + 256 * r:2048 + 256 * r + 64] = torch.tensor([4, 3, 2, 1] * 16,
                                                                 dtype=torch.uint8)
    assert n == 4, n
    assert torch.equal(buf.cpu(), want), (buf.cpu() != want).nonzero()[:8]
    print(f"check: {n} memset nodes swapped for kernels, bytes as the memsets write them")


def build(direction: str, copies: int, swap: bool, steps: int = 400):
    ops = cc.chain("memset", steps)
    chunk = (40 * 2**20 // max(copies, 1)) // 2
    dev = [torch.randn(chunk, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    host = [torch.empty(chunk, dtype=torch.bfloat16, pin_memory=True) for _ in range(copies)]
    side = torch.cuda.Stream()
    every = max(steps // max(copies, 1), 1)

    def body():
        main = torch.cuda.current_stream()
        done = []
        for i, op in enumerate(ops):
            op()
            if i % every == 0 and i // every < copies:
                k = i // every
                side.wait_stream(main)
                with torch.cuda.stream(side):
                    src, dst = (dev[k], host[k]) if direction == "d2h" else (host[k], dev[k])
                    dst.copy_(src, non_blocking=True)
                done.append(side.record_event())
        if done:
            main.wait_event(done[-1])

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        body()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(g):
        body()
    swapped = memsets_as_kernels(g.raw_cuda_graph()) if swap else 0
    g.instantiate()
    g.keep = (ops, dev, host, side)
    return g, swapped


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args()
    check()
    cases = [(d, c, sw) for sw in (False, True) for d, c in (("d2h", 0), ("h2d", 36), ("d2h", 36))]
    graphs = {c: build(*c) for c in cases}
    ms = {c: [] for c in cases}
    for _ in range(args.reps):
        for c, (g, _) in graphs.items():
            ms[c].append(cc.time_graph(g))
    print("memset nodes  copies      | ms median | x same chain, no copies, memset nodes")
    base = ms[("d2h", 0, False)]
    for c in cases:
        q = sorted(a / b for a, b in zip(ms[c], base, strict=True))
        label = "as kernels" if c[2] else "as memsets"
        print(f"{label:13} {c[1]:3} {c[0]:6} | {statistics.median(ms[c]):8.3f} | "
              f"{statistics.median(q):.3f} [{q[0]:.3f}-{q[-1]:.3f}]  ({graphs[c][1]} swapped)")


if __name__ == "__main__":
    main()
