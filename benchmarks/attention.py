"""fxslots' attention forward against PyTorch's SDPA kernels, and the copy it saves.

fxslots routes ``aten._scaled_dot_product_efficient_attention`` through its own Triton forward
(fxslots/attention.py), which writes output and logsumexp into the slot; PyTorch's kernels
allocate theirs, and fxslots then copies them in. This times, per shape and dtype, each forward
as a CUDA graph of 20 calls (so launch cost is what a captured step pays):

- ``fxslots``: fxslots' kernel into preallocated output and logsumexp;
- ``efficient+copy``: PyTorch's efficient kernel, then the copies of output and logsumexp into
  preallocated memory (what fxslots ran before);
- ``efficient``, ``flash``, ``cudnn``: PyTorch's kernels alone (what SDPA picks in bf16 on an
  H200 is cuDNN's or flash's, which fxslots does not route: their rows say what an own route for
  them would have to match);
- and the efficient backward from either forward's results (the same kernel: a check that its
  inputs cost it nothing).

    python benchmarks/attention.py [--reps 11] [--out attention.json]

Prints a table (median ms per call, ratio to ``efficient+copy``, min-max over repetitions) and
writes JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from fxslots import attention

aten = torch.ops.aten
SHAPES = [  # (name, batch, heads, seq, head size): the benchmark's Llama models, the zoo's, and
    # sizes on either side of attention.MAX_FLOPS (causal forward FLOPs in the name)
    ("zoo", 2, 4, 12, 8),
    ("2M", 2, 4, 64, 32),
    ("34M", 2, 8, 128, 64),
    ("llama-small", 2, 12, 512, 64),
    ("3.2G", 2, 12, 1024, 64),
    ("llama-large", 4, 16, 2048, 128),
]
CALLS = 20


def _graph_ms(fn, reps: int) -> list[float]:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(CALLS):
            fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / CALLS)
    return times


def _cases(q, k, v):
    eff = aten._scaled_dot_product_efficient_attention.default
    theirs = eff(q, k, v, None, True, 0.0, True)
    dest = [torch.empty_like(t) for t in theirs]
    grad = torch.randn_like(q)
    bwd = aten._scaled_dot_product_efficient_attention_backward.default

    def ours():
        attention.efficient_attention_out(q, k, v, None, True, 0.0, True, out0=dest[0],
                                          out1=dest[1], out2=dest[2], out3=dest[3])

    def copied():  # fxslots copied output and logsumexp (the seeds are 8-byte host scalars)
        r = eff(q, k, v, None, True, 0.0, True)
        torch._foreach_copy_(dest[:2], list(r[:2]))

    def ours_tf32x3():  # fp32 products as three TF32 ones, on tensor cores
        attention.F32_PRECISION = "tf32x3"
        try:
            ours()
        finally:
            attention.F32_PRECISION = "ieee"

    cases = {"fxslots": ours, "efficient+copy": copied,
             "efficient": lambda: eff(q, k, v, None, True, 0.0, True),
             "backward(fxslots fwd)": lambda: bwd(grad, q, k, v, None, *dest, 0.0,
                                                  [True] * 3 + [False], True),
             "backward(efficient fwd)": lambda: bwd(grad, q, k, v, None, *theirs, 0.0,
                                                    [True] * 3 + [False], True)}
    if q.dtype == torch.float32:
        cases["fxslots tf32x3"] = ours_tf32x3
    else:
        cases["flash"] = lambda: aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)
        cases["cudnn"] = lambda: aten._scaled_dot_product_cudnn_attention(
            q, k, v, None, True, 0.0, True)
    ours()
    err = (dest[0].float() - theirs[0].float()).abs().max().item()
    return cases, err


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--out", default="attention.json")
    args = ap.parse_args()
    rows = []
    print(f"{'shape':12} {'dtype':9} {'case':24} {'ms':>9} {'x eff+copy':>10}  spread")
    for name, b, h, s, d in SHAPES:
        for dtype in (torch.float32, torch.bfloat16):
            torch.manual_seed(0)
            q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype) for _ in range(3))
            cases, err = _cases(q, k, v)
            times = {}
            for case, fn in cases.items():
                try:
                    times[case] = _graph_ms(fn, args.reps)
                except RuntimeError as e:  # a kernel that does not take this shape or dtype
                    print(f"{name:12} {str(dtype)[6:]:9} {case:24} n/a ({str(e)[:60]})")
            base = statistics.median(times["efficient+copy"])
            for case, t in times.items():
                med = statistics.median(t)
                rows.append({"shape": name, "dtype": str(dtype), "case": case, "median_ms": med,
                             "min_ms": min(t), "max_ms": max(t), "ratio": med / base,
                             "max_abs_err_vs_efficient": err})
                print(f"{name:12} {str(dtype)[6:]:9} {case:24} {med:9.4f} {med / base:10.3f}  "
                      f"[{min(t):.4f}-{max(t):.4f}]")
            print(f"{name:12} {str(dtype)[6:]:9} max |fxslots - efficient| output: {err:.2e}")
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "calls_per_graph": CALLS, "rows": rows}, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
