"""Run 68c: is a CUDA graph's side branch itself a cost, apart from the bytes it moves?
The copy_contention.py small chain (400 elementwise kernels, ~1.3 ms), captured with: no
branch; one 4 KiB device-to-host copy forked at the start and joined at the end; 36 such
copies each forked after its point of the chain (spread) and joined once at the end; the same
36 under one fork at the start. Bytes are negligible, so any cost is the graph's shape."""
import statistics
import sys

import torch

sys.path.insert(0, "benchmarks")
from copy_contention import chain, time_graph  # noqa: E402


def build(copies: int, where: str, steps: int = 400, elems: int = 2048):
    ops = chain("small", steps)
    dev = [torch.randn(elems, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    host = [torch.empty(elems, dtype=torch.bfloat16, pin_memory=True) for _ in range(copies)]
    side = torch.cuda.Stream()
    every = max(steps // max(copies, 1), 1)

    def body():
        main = torch.cuda.current_stream()
        forked = False
        for i, op in enumerate(ops):
            op()
            if where == "spread" and i % every == 0 and i // every < copies:
                side.wait_stream(main)
                with torch.cuda.stream(side):
                    host[i // every].copy_(dev[i // every], non_blocking=True)
                forked = True
            if where == "start" and i == 0 and copies:
                side.wait_stream(main)
                with torch.cuda.stream(side):
                    for d, h in zip(dev, host):
                        h.copy_(d, non_blocking=True)
                forked = True
        if forked:
            main.wait_stream(side)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        body()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body()
    g.keep = (ops, dev, host, side)
    return g


CASES = [(0, "none"), (1, "start"), (36, "start"), (36, "spread"), (144, "spread")]
graphs = {c: build(*c) for c in CASES}
ms = {c: [] for c in CASES}
for _ in range(9):
    for c, g in graphs.items():
        ms[c].append(time_graph(g, 30))
print(torch.cuda.get_device_name())
for c in CASES:
    q = sorted(a / b for a, b in zip(ms[c], ms[(0, "none")]))
    print(f"{c[0]:4} copies of 4 KiB, {c[1]:6}: {statistics.median(ms[c]):.4f} ms, "
          f"x none {statistics.median(q):.4f} [{q[0]:.4f}-{q[-1]:.4f}]")
