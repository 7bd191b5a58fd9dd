"""Host microseconds of the primitives fxslots' per-call wrappers use, on this machine (run 36b).
Pure-Python lines first (to compare hosts), then the CUDA ones (skipped without a GPU)."""
import sys
import timeit
import weakref

import torch

from fxslots import _torch
from fxslots.runtime.cudagraphs.keys import CaptureKey
from fxslots.runtime.variant import Direction


def t(label, fn, n=3000):
    fn()
    us = min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6
    print(f"{label:<52} {us:8.2f} us")


params = [torch.nn.Parameter(torch.zeros(4)) for _ in range(24)]
t("python: sum(range(100))", lambda: sum(range(100)))
t("python: 24 weakref.ref", lambda: tuple(weakref.ref(p) for p in params))
t("python: CaptureKey(...) + hash", lambda: hash(CaptureKey(
    Direction.FORWARD, 0, 1, 0, ((8,),), delivers=-1, params=123)))


def deep(n):
    return deep(n - 1) if n else sys._getframe(0)


def walk():
    f = sys._getframe(1)
    for _ in range(12):
        if f is None:
            break
        code = f.f_code
        if code.co_name == "forward" and "ctx" in code.co_varnames:
            break
        f = f.f_back


t("python: walk 12 frames", lambda: deep(10) and walk())
cpu = torch.empty(1 << 20, dtype=torch.uint8)
t("cpu: 24 data_ptr()", lambda: [p.data_ptr() for p in params])
if not torch.cuda.is_available():
    sys.exit(0)
dev = torch.device("cuda", torch.cuda.current_device())
arena = torch.empty(1 << 24, dtype=torch.uint8, device=dev)
alias = _torch.storage_alias(arena.data_ptr(), dev, 1 << 24)
t("cuda: storage_alias", lambda: _torch.storage_alias(arena.data_ptr(), dev, 1 << 24))
t("cuda: StorageWeakRef(alias)", lambda: _torch.StorageWeakRef(alias))
t("cuda: token empty(0).set_(alias)",
  lambda: torch.empty(0, dtype=torch.uint8, device=dev).set_(alias))
base = torch.empty(0, dtype=torch.float32, device=dev).set_(alias)
t("cuda: one as_strided", lambda: base.as_strided((64, 64), (64, 1), 0))
t("cuda: as_strided((24,64,64)).unbind(0)",
  lambda: base.as_strided((24, 64, 64), (4096, 64, 1), 0).unbind(0))
t("cuda: torch.empty(1 MiB)", lambda: torch.empty(1 << 20, dtype=torch.uint8, device=dev))
src = [torch.randn(64, 64, device=dev) for _ in range(24)]
dst = [torch.empty_like(s) for s in src]
t("cuda: foreach_copy_ 1 tensor", lambda: torch._foreach_copy_(dst[:1], src[:1]))
t("cuda: foreach_copy_ 24 tensors", lambda: torch._foreach_copy_(dst, src))
t("cuda: copy_ 1 tensor", lambda: dst[0].copy_(src[0]))
t("cuda: 24 data_ptr()", lambda: [s.data_ptr() for s in src])
t("cuda: current_stream()", lambda: torch.cuda.current_stream())
for kernels in (1, 48):
    x = torch.randn(64, 64, device=dev)
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            y = x
            for _ in range(kernels):
                y = y * 1.0001
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        y = x
        for _ in range(kernels):
            y = y * 1.0001
    t(f"cuda: replay a graph of {kernels} kernels", g.replay, n=1000)
    torch.cuda.synchronize()
big = torch.randn(2, 512, 768, device=dev)
bigd = torch.empty_like(big)
t("cuda: copy_ of a 3 MiB activation", lambda: bigd.copy_(big))
t("cuda: empty_strided + copy_ 3 MiB", lambda: torch.empty_strided(big.shape, big.stride(), dtype=big.dtype, device=dev).copy_(big))
bf = big.to(torch.bfloat16); bfd = torch.empty_like(bf)
t("cuda: copy_ bf16 1.5 MiB", lambda: bfd.copy_(bf))
t("cuda: x.data_ptr()", lambda: big.data_ptr())
