"""Run 21c (not a test): what makes cudaGraphLaunch's host time grow with the graph on this
driver: a straight chain of kernels, with memsets, with device copies, with side-stream
branches (event fork/join, a D2H copy into pinned memory)."""
import time, torch
torch.cuda.init()
dev = torch.device("cuda")
x = torch.zeros(4096, device=dev); y = torch.zeros(4096, device=dev); z = torch.zeros(4096, device=dev)
host = torch.empty(4096 * 4, dtype=torch.uint8, pin_memory=True)
side = torch.cuda.Stream()

A = torch.randn(512, 768, device=dev, dtype=torch.bfloat16); W = torch.randn(768, 768, device=dev, dtype=torch.bfloat16)
q = torch.randn(2, 12, 512, 64, device=dev, dtype=torch.bfloat16)
parts = [torch.randn(2, 4, 512, 64, device=dev) for _ in range(3)]
xb = torch.zeros(4096, device=dev, dtype=torch.bfloat16); xb2 = torch.ones(4096, device=dev, dtype=torch.bfloat16)
O = torch.empty(512, 768, device=dev, dtype=torch.bfloat16)

def body(n, kind):
    cur = torch.cuda.current_stream()
    for i in range(n):
        if kind == "matmul":
            torch.mm(A, W, out=O); continue
        if kind == "sdpa":
            torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True); continue
        if kind == "sdpa_flash":
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
                torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
            continue
        if kind == "sdpa_efficient":
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION):
                torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
            continue
        if kind == "cat":
            torch.cat(parts, dim=1); continue
        if kind == "strided":
            x.view(64, 64).t().add_(1); continue
        if kind == "strided_bf16":
            xb.view(64, 64).t().mul_(xb2.view(64, 64)); continue
        if kind == "sum":
            x.sum(); continue
        if kind == "h2d":
            if i % 10 == 0:
                y.view(torch.uint8).copy_(host, non_blocking=True)
            x.add_(1); continue
        x.add_(1)
        if kind == "memset" and i % 10 == 0:
            y.zero_()
        if kind == "memcpy" and i % 10 == 0:
            y.copy_(z)
        if kind == "fill_kernel" and i % 10 == 0:
            y.fill_(1.5)
        if kind in ("branch_d2h", "branch_kernel") and i % 10 == 0:
            side.wait_stream(cur)
            with torch.cuda.stream(side):
                if kind == "branch_d2h":
                    host.copy_(y.view(torch.uint8), non_blocking=True)
                else:
                    y.mul_(1.0)
    if kind.startswith("branch"):
        cur.wait_stream(side)

def measure(n, kind):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        body(n, kind)  # warm
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body(n, kind)
    g.replay(); torch.cuda.synchronize()
    hs = []
    for _ in range(30):
        torch.cuda.synchronize()
        t0 = time.perf_counter(); g.replay(); hs.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(20): g.replay()
    b.record(); torch.cuda.synchronize()
    hs.sort()
    print(f"{kind:14s} n={n:5d}: replay host {hs[15]*1e6:8.1f} us (min {hs[0]*1e6:7.1f}); "
          f"GPU {a.elapsed_time(b)/20*1e3:8.1f} us/replay", flush=True)

import sys
kinds = sys.argv[1].split(",") if len(sys.argv) > 1 else ("chain", "memset", "memcpy", "fill_kernel", "branch_kernel", "branch_d2h")
for kind in kinds:
    for n in (100, 400):
        measure(n, kind)

def alternate(n, kind_a, kind_b):
    graphs = []
    for kind in (kind_a, kind_b):
        s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            body(n, kind)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            body(n, kind)
        graphs.append(g)
    ha, hb = [], []
    for _ in range(30):
        torch.cuda.synchronize()
        t0 = time.perf_counter(); graphs[0].replay(); t1 = time.perf_counter(); graphs[1].replay(); t2 = time.perf_counter()
        ha.append(t1 - t0); hb.append(t2 - t1)
    ha.sort(); hb.sort()
    print(f"alternate {kind_a}/{kind_b} n={n}: host A {ha[15]*1e6:.1f} us, B {hb[15]*1e6:.1f} us", flush=True)
    # no sync between: the host runs ahead
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        graphs[0].replay(); graphs[1].replay()
    t1 = time.perf_counter(); torch.cuda.synchronize(); t2 = time.perf_counter()
    print(f"   back-to-back: host {((t1-t0)/20)*1e6:.1f} us per pair, total {((t2-t0)/20)*1e6:.1f} us per pair", flush=True)

if len(sys.argv) > 2:
    for n in (100,):
        alternate(n, "chain", "sdpa")
        alternate(n, "chain", "sdpa_flash")
