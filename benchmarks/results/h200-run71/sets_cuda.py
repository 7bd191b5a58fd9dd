"""Run 71 (session 51): this session's two fixes under real CUDA graphs.
1. A penalty that starts at step 2 and stops at step 5 with .grad kept (set_to_none=False):
   tests/test_feeds.py's scenario; every step bitwise eager's but step 2 (the in-graph add
   came first there), and the adds back in the graph once it stops.
2. Short-lived models beside one that lives on (one compiled graph serves the class): graphs,
   output buffers and allocated bytes after each is deleted, against before the first."""
import gc
import os
import sys

import torch

sys.path.insert(0, ".")
import fxslots  # noqa: E402
from fxslots.runtime import feeds, variant  # noqa: E402
from tests import test_feeds as T  # noqa: E402
from tests.test_graph_executor_cpu import _NormFirst  # noqa: E402


def _graphs_and_sets() -> tuple[int, int]:
    regions = fxslots.regions()
    graphs = sum(len(getattr(v.executor, "graphs", ())) for r in regions
                 for v in r.live_variants())
    return graphs, sum(len(r.param_sets) + len(r.related) + len(r.outputs) for r in regions)


DEV = os.environ.get("DEV", "cuda")  # DEV=cpu: a dry run of this script
counts = [0, 0]
buffers = variant.Variant._grad_buffers
variant.Variant._grad_buffers = T.counting_adds(counts)
feeds.WATCH_FIRST, feeds.WATCH_EVERY = 2, 2
torch.set_default_device(DEV)
_generator = torch.Generator
torch.Generator = lambda device=DEV: _generator(device=device)
for kind, penalised in (("starts at 2, stops at 5", lambda s: 2 <= s < 5),
                        ("starts at 2", lambda s: s >= 2)):
    torch._dynamo.reset(); fxslots.reset(); counts[:] = [0, 0]
    try:
        T._train(T._Penalised, steps=8, set_to_none=False, penalised=penalised,
                 exact=lambda s: s != 2)
        verdict = "bitwise eager every step but 2"
    except AssertionError as e:
        verdict = f"DIFFERS {e}"
    print(f"penalty {kind}, .grad kept: {verdict}; in-graph {counts}; captures "
          f"{fxslots.counters['captures']}", flush=True)
torch.Generator = _generator
variant.Variant._grad_buffers = buffers
feeds.WATCH_FIRST, feeds.WATCH_EVERY = 4, 16

torch._dynamo.reset(); fxslots.reset()
keeper = _NormFirst().to(DEV)
ck = torch.compile(keeper, backend="fxslots", options={"slots": 2})
for _ in range(4):
    ck(torch.randn(4, 16, device=DEV)).sum().backward()
gc.collect()
base = _graphs_and_sets(), torch.cuda.memory_allocated() if DEV == "cuda" else 0
print(f"keeper alone: (graphs, sets) {base[0]}, allocated {base[1]} B", flush=True)
for i in range(5):
    model = _NormFirst().to(DEV)
    c = torch.compile(model, backend="fxslots", options={"slots": 2})
    for _ in range(4):
        c(torch.randn(4, 16, device=DEV)).sum().backward()
    during = _graphs_and_sets()
    del model, c
    gc.collect()
    now = _graphs_and_sets(), torch.cuda.memory_allocated() if DEV == "cuda" else 0
    print(f"model {i}: with it {during}, after deleting it {now[0]}, allocated {now[1]} B "
          f"({now[1] - base[1]:+d} against the keeper alone)", flush=True)
ck(torch.randn(4, 16, device=DEV)).sum().backward()
print(f"keeper again: {_graphs_and_sets()}; captures {fxslots.counters['captures']}")

# 3. The review's crash: a backward under vmap (is_grads_batched=True) after captured steps.
from examples.models import MLP  # noqa: E402

torch._dynamo.reset(); fxslots.reset()
torch.manual_seed(0)
ours, ref = MLP(8, 16, 3).to(DEV), MLP(8, 16, 3).to(DEV)
ref.load_state_dict(ours.state_dict())
f = torch.compile(ours, backend="fxslots", options={"slots": 1})
g = torch.compile(ref, backend="aot_eager")
for _ in range(3):
    x = torch.randn(2, 8, device=DEV)
    f(x).sum().backward(); g(x).sum().backward()
x = torch.randn(2, 8, device=DEV, requires_grad=True)
v = torch.eye(16, device=DEV).view(16, 2, 8)
(a,), (b,) = (torch.autograd.grad(h(x), x, v, is_grads_batched=True) for h in (f, g))
print(f"vmap backward after captures: {'bitwise' if torch.equal(a, b) else (a - b).abs().max()}; "
      f"captures {fxslots.counters['captures']}")
