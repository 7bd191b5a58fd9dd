"""Run 51: host memory a kept cudaGraph_t costs (memsets="kernels" captures with
``keep_graph=True``, and torch keeps the graph beside its instantiation until the CUDAGraph
dies). Captures 40 graphs of 2000 small kernels each way and reports the process's resident
memory growth per graph node: not kept, kept, and kept then emptied after instantiation (every
node destroyed through the driver, which an instantiated graph no longer needs; the way out
should a kept graph cost much), with the seconds emptying took.

    python3 benchmarks/results/h200-run51/kept_graphs.py
"""

import ctypes
import gc
import subprocess
import sys
import time

import torch

GRAPHS, NODES = 40, 2000


def rss() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))


def empty(graph: int, lib) -> None:
    """Destroy every node of ``graph`` (its instantiation keeps running)."""
    n = ctypes.c_size_t(0)
    assert lib.cuGraphGetNodes(ctypes.c_void_p(graph), None, ctypes.byref(n)) == 0
    nodes = (ctypes.c_void_p * n.value)()
    assert lib.cuGraphGetNodes(ctypes.c_void_p(graph), nodes, ctypes.byref(n)) == 0
    for node in nodes:
        assert lib.cuGraphDestroyNode(ctypes.c_void_p(node)) == 0


def capture(mode: str, graphs: int = GRAPHS, nodes: int = NODES) -> tuple[list, float]:
    lib = ctypes.CDLL("libcuda.so.1")
    x = torch.zeros(256, device="cuda")
    out, emptying = [], 0.0
    for _ in range(graphs):
        g = torch.cuda.CUDAGraph(keep_graph=mode != "not kept")
        with torch.cuda.graph(g):
            for _ in range(nodes):
                x.add_(1)
        if mode != "not kept":
            g.instantiate()
        if mode == "kept, emptied":
            t = time.perf_counter()
            empty(g.raw_cuda_graph(), lib)
            emptying += time.perf_counter() - t
        out.append(g)
    x.zero_()
    for g in out:  # still replays: the instantiation is independent of the graph
        g.replay()
    torch.cuda.synchronize()
    assert x[0].item() == graphs * nodes, x[0].item()
    return out, emptying


def main() -> None:
    """Each mode in a fresh process: freed host memory stays in the process's heap and is
    reused, so modes measured one after another in one process hide each other (run 51c)."""
    if len(sys.argv) > 1:
        mode = sys.argv[1]
        capture("not kept", 2, 100)  # warm: the allocator, the context, the kernel
        gc.collect()
        before = rss()
        held, emptying = capture(mode)
        grown = rss() - before
        print(f"{mode:14}: {grown / 2**20:7.1f} MiB for {GRAPHS} x {NODES} nodes, "
              f"{grown / (GRAPHS * NODES):6.0f} bytes a node; emptying {emptying:.3f} s")
        del held
        return
    for mode in ("not kept", "kept", "kept, emptied"):
        subprocess.run([sys.executable, __file__, mode], check=True)


if __name__ == "__main__":
    main()
