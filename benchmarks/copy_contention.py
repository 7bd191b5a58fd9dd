"""What side-stream copies cost the compute beside them inside one CUDA graph.

``offload="auto"`` plans copies that hide under compute, yet on llama-small it measured
1.04-1.07x no offload, growing with the bytes moved (H200 runs 27-28). This separates the
candidates with no fxslots in the way: a chain of small kernels like llama-small's (about
4 us each), of whole-tensor sums (a memset node before each, as cuDNN's attention backward
and ATen's large reductions have) or of matrix products, captured once with no copies and
once with ``copies`` device-to-host (or host-to-device) copies of ``MiB`` in all on a side
stream, each forked after a point of the chain as ``fxslots.streams.offload`` forks them,
joined at the end. Per-copy cost shows as a change with the count at equal bytes; per-byte
cost (memory or front-end contention) as a change with the bytes at equal count; ``start``
forks every copy at the graph's start, so any time above compute-only is contention, not
waiting; ``joined`` spreads them and joins each copy just before the next one forks (long
after it is done, as ``offload_wait`` joins), so a cost beyond ``spread``'s is the joins' own.

Run 28e: a join costs the small chain 0.9-1.7 us, a fork and its copy 0.2-0.6 us, and 40 MiB
moved beside it 1.4-2.8%; beside matrix products the bytes cost under 1%. The "memset" chain
puts a 4-byte driver memset (a memset node) before each op of the small chain, and "fill" a
fill kernel in its place: whether memset nodes wait for the host-link copies (run 48).

    python benchmarks/copy_contention.py [--reps 7] [--out copy_contention.json]

Prints a table (median replay ms, ratio to the same chain with no copies, min-max over
repetitions) and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

CASES = [  # (compute, direction, copies, MiB, where)
    ("small", "d2h", 0, 0, "spread"),
    ("small", "d2h", 36, 83, "spread"),
    ("small", "d2h", 9, 83, "spread"),
    ("small", "d2h", 144, 83, "spread"),
    ("small", "d2h", 36, 2, "spread"),
    ("small", "d2h", 36, 2, "joined"),
    ("small", "d2h", 144, 2, "spread"),
    ("small", "d2h", 144, 2, "joined"),
    ("small", "h2d", 36, 2, "joined"),
    ("small", "d2h", 36, 40, "spread"),
    ("small", "d2h", 36, 40, "start"),
    ("small", "h2d", 36, 83, "spread"),
    ("small", "h2d", 36, 40, "start"),
    ("reduce", "d2h", 0, 0, "spread"),
    ("reduce", "d2h", 36, 40, "spread"),
    ("reduce", "d2h", 36, 40, "start"),
    ("matmul", "d2h", 0, 0, "spread"),
    ("matmul", "d2h", 36, 83, "spread"),
    ("matmul", "d2h", 36, 40, "start"),
    # Run 48: under offload, llama-small's compute waited after each 4-byte memset node (cuDNN
    # attention's, split reductions'); the same small chain with such a memset before each op
    # (driver memset: a memset node) against a fill kernel in its place
    ("memset", "d2h", 0, 0, "spread"),
    ("memset", "d2h", 36, 40, "spread"),
    ("memset", "h2d", 36, 40, "spread"),
    ("fill", "d2h", 0, 0, "spread"),
    ("fill", "d2h", 36, 40, "spread"),
    ("fill", "h2d", 36, 40, "spread"),
]


def chain(kind: str, n: int):
    """A compute chain of ``n`` kernels and its tensors, on the current stream."""
    if kind in ("small", "memset", "fill"):  # 1.5 MiB bf16 operands, as llama-small's
        x = torch.randn(768 * 1024, device="cuda", dtype=torch.bfloat16)  # elementwise ops
        y = torch.randn_like(x)
        if kind == "small":
            return [lambda: x.mul_(0.999).add_(y)] * n
        flag = torch.zeros(1, device="cuda", dtype=torch.int32)
        first = (lambda: flag.fill_(0)) if kind == "fill" else (lambda: _memset(flag))
        return [lambda: (first(), x.mul_(0.999).add_(y))] * n
    if kind == "reduce":  # a whole-tensor sum: its blocks meet through a memset semaphore
        x = torch.randn(768 * 1024, device="cuda", dtype=torch.bfloat16)
        out = torch.empty((), device="cuda", dtype=torch.bfloat16)
        return [lambda: out.copy_(x.sum())] * n
    a = torch.randn(1024, 768, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(768, 768, device="cuda", dtype=torch.bfloat16) / 30
    return [lambda: a.copy_(a @ w)] * n


def _memset(t: torch.Tensor) -> None:
    """A 4-byte driver memset on the current stream: a memset node when captured."""
    import ctypes

    global _CUDA
    if _CUDA is None:
        _CUDA = ctypes.CDLL("libcuda.so.1")
        _CUDA.cuMemsetD32Async.argtypes = [ctypes.c_uint64, ctypes.c_uint, ctypes.c_size_t,
                                           ctypes.c_void_p]
    rc = _CUDA.cuMemsetD32Async(t.data_ptr(), 0, t.numel(),
                                torch.cuda.current_stream().cuda_stream)
    assert rc == 0, f"cuMemsetD32Async failed: {rc}"


_CUDA = None


def build(compute: str, direction: str, copies: int, mib: int, where: str, steps: int = 400):
    ops = chain(compute, steps)
    chunk = (mib * 2**20 // max(copies, 1)) // 2
    dev = [torch.randn(chunk, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    host = [torch.empty(chunk, dtype=torch.bfloat16, pin_memory=True) for _ in range(copies)]
    side = torch.cuda.Stream()
    every = max(steps // max(copies, 1), 1)

    spread = where in ("spread", "joined")

    def body():
        main = torch.cuda.current_stream()
        done = []
        for i, op in enumerate(ops):
            op()
            k = i // every if spread else i
            if (spread and i % every == 0 or where == "start" and i == 0) and k < copies:
                if where == "joined" and done:
                    main.wait_event(done[-1])
                side.wait_stream(main)
                with torch.cuda.stream(side):
                    for j in ([k] if spread else range(copies)):
                        src, dst = (dev[j], host[j]) if direction == "d2h" else (host[j], dev[j])
                        dst.copy_(src, non_blocking=True)
                done.append(side.record_event())
        if done:  # the last copy's event: the stream's copies end in order
            main.wait_event(done[-1])

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        body()  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body()
    g.keep = (ops, dev, host, side)  # the graph's copy nodes read and write these addresses
    return g


def time_graph(g, replays: int = 20) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    g.replay()
    start.record()
    for _ in range(replays):
        g.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / replays


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--out", default="copy_contention.json")
    args = p.parse_args()
    graphs = {c: build(*c) for c in CASES}
    ms = {c: [] for c in CASES}
    for _ in range(args.reps):  # interleaved: each repetition visits every case
        for c, g in graphs.items():
            ms[c].append(time_graph(g))
    rows = []
    print(f"{'compute':7} {'dir':4} {'copies':>6} {'MiB':>4} {'where':6} | ms median | "
          f"x no copies median [min-max]")
    for c in CASES:
        base = ms[(c[0], "d2h", 0, 0, "spread")]  # every kind has its case with no copies
        q = sorted(a / b for a, b in zip(ms[c], base, strict=True))
        row = dict(zip(("compute", "direction", "copies", "mib", "where"), c, strict=True))
        row |= {"ms": ms[c], "ratio_median": statistics.median(q), "ratio_min": q[0],
                "ratio_max": q[-1]}
        rows.append(row)
        print(f"{c[0]:7} {c[1]:4} {c[2]:6} {c[3]:4} {c[4]:6} | {statistics.median(ms[c]):8.3f} "
              f"| {row['ratio_median']:.3f} [{q[0]:.3f}-{q[-1]:.3f}]")
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
