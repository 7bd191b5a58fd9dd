"""Run 51: host memory a kept cudaGraph_t costs (memsets="kernels" captures with
``keep_graph=True``, and torch keeps the graph beside its instantiation until the CUDAGraph
dies). Captures 40 graphs of 2000 small kernels each way and reports the process's resident
memory growth per graph node.

    python3 benchmarks/results/h200-run51/kept_graphs.py
"""

import gc

import torch


def rss() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))


def capture(keep: bool, graphs: int = 40, nodes: int = 2000) -> list:
    x = torch.zeros(256, device="cuda")
    out = []
    for _ in range(graphs):
        g = torch.cuda.CUDAGraph(keep_graph=keep)
        with torch.cuda.graph(g):
            for _ in range(nodes):
                x.add_(1)
        if keep:
            g.instantiate()
        out.append(g)
    torch.cuda.synchronize()
    return out


def main() -> None:
    capture(False, 2, 100)  # warm: the allocator, the context, the kernel
    for keep in (False, True, False, True):
        gc.collect()
        before = rss()
        held = capture(keep)
        grown = rss() - before
        print(f"keep_graph={keep!s:5}: {grown / 2**20:7.1f} MiB for 40 x 2000 nodes, "
              f"{grown / 80000:6.0f} bytes a node")
        del held


if __name__ == "__main__":
    main()
