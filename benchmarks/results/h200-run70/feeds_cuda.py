"""Run 70 (session 50): tests/test_feeds.py's scenarios on CUDA with real CUDA graphs: a
parameter eager code feeds too (a tied eager embedding, a hand-written weight penalty) and a
block that moves to another compiled graph when the block below it freezes. Prints, per
scenario, whether every .grad is bitwise the eager twin's after each step, the in-graph adds
(backwards that added into .grad themselves / those that could), and captures per step."""
import sys

import torch

sys.path.insert(0, ".")
import fxslots  # noqa: E402
from fxslots.runtime import variant  # noqa: E402
from tests import test_feeds as T  # noqa: E402

counts = [0, 0]
variant.Variant._grad_buffers = T.counting_adds(counts)
import os
DEV = os.environ.get("DEV", "cuda")  # DEV=cpu: a dry run of this script
torch.set_default_device(DEV)
_generator = torch.Generator
torch.Generator = lambda device=DEV: _generator(device=device)  # the tests' seeded draws
for name, make in (("tied-eager-embedding", T._Tied), ("penalty", T._Penalised)):
    for set_to_none in (False, True):
        torch._dynamo.reset(); fxslots.reset(); counts[:] = [0, 0]
        c0 = fxslots.counters["captures"]
        try:
            T._train(make, steps=6, set_to_none=set_to_none)
            verdict = "bitwise eager every step"
        except AssertionError as e:
            verdict = f"DIFFERS {e}"
        print(f"{name:22s} set_to_none={set_to_none!s:5s} {verdict}; in-graph {counts}; "
              f"captures {fxslots.counters['captures'] - c0}", flush=True)
torch._dynamo.reset(); fxslots.reset(); counts[:] = [0, 0]
try:
    T._train(T._Penalised, steps=6, set_to_none=True, penalised=lambda step: step < 2)
    print(f"penalty dropped after step 2: bitwise eager; in-graph {counts}", flush=True)
except AssertionError as e:
    print(f"penalty dropped: DIFFERS {e}")


class _Req:
    def getfixturevalue(self, name):
        pass  # real CUDA graphs here, no stand-in


torch._dynamo.reset(); fxslots.reset(); counts[:] = [0, 0]
try:
    T.test_a_block_that_moves_to_another_graph_keeps_adding_in_the_graph(_Req(), True, counts)
    print(f"frozen bottom block: bitwise eager, in-graph {counts}, no capture after step 5")
except AssertionError as e:
    print(f"frozen bottom block: FAILED {e}; in-graph {counts}")

# Session 50's review: .grad buffers that share bytes (one multi-tensor add wrote both at once).
torch.Generator = _generator  # torch's annotations read it (`torch.Generator | None`)
import copy  # noqa: E402

from torch import nn  # noqa: E402

from tests.test_accumulate import give_grads_sharing_bytes  # noqa: E402

for how in ("alias", "overlap", "disjoint"):
    torch._dynamo.reset(); fxslots.reset(); counts[:] = [0, 0]
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16))
    e, a_m = copy.deepcopy(m), copy.deepcopy(m)
    c = torch.compile(m, backend="fxslots", options={"slots": 1})
    a_c = torch.compile(a_m, backend="aot_eager")  # autograd adds the two in its own order
    worst = worst_aot = 0.0
    for step in range(4):
        x = torch.randn(4, 8)
        if step == 1:
            for model in (m, e, a_m):
                give_grads_sharing_bytes(model, how)
        for f in (c, e, a_c):
            f(x).square().sum().backward()
        worst = max(worst, max((p.grad - q.grad).abs().max().item()
                               for p, q in zip(m.parameters(), e.parameters(), strict=True)))
        worst_aot = max(worst_aot, max((p.grad - q.grad).abs().max().item() for p, q in
                                       zip(m.parameters(), a_m.parameters(), strict=True)))
    print(f".grad sharing bytes ({how:8s}): max |fxslots - eager| = {worst:.3g}, "
          f"|fxslots - aot_eager| = {worst_aot:.3g}; in-graph {counts}", flush=True)
