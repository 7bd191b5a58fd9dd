"""Run 62b: why the mutant `recovery-leaves-generators-capturing` survived run 61a although
rng_probe.py (62a) shows a registered generator that drew in a failed capture stays broken
unless a later capture registers it. Runs the failed-capture test's model with and without the
recovery probe registering the failed capture's generators, and after each step tries every
generator the captures registered."""
import sys

import torch

import fxslots
from fxslots.runtime.cudagraphs import pool
from tests.test_cuda_checkpointed_rng import CheckpointedDropoutThatSyncs

seen: dict[int, torch.Generator] = {}
state = {"recovering": False, "mutant": False}
register = pool.register_generators
recover = pool.recover


def registering(graph, args, device):
    gens = [a for a in args if isinstance(a, torch.Generator)]
    for g in gens:
        seen.setdefault(id(g), g)
    print(f"    register {'(recovery) ' if state['recovering'] else ''}{len(gens)} generators "
          f"offsets {[g.get_offset() for g in gens]}")
    if not (state["recovering"] and state["mutant"]):
        register(graph, args, device)


def recovering(*a, **k):
    state["recovering"] = True
    try:
        return recover(*a, **k)
    finally:
        state["recovering"] = False


pool.register_generators = registering
pool.recover = recovering

for mutant in (False, True):
    state["mutant"] = mutant
    seen.clear()
    print(f"mutant={mutant}")
    fxslots.reset()
    torch._dynamo.reset()
    m = CheckpointedDropoutThatSyncs().cuda()
    f = torch.compile(m, backend="fxslots", options={"slots": 1, "on_capture_failure": "eager"})
    x = torch.randn(4, 32, 64, device="cuda")
    for step in range(4):
        try:
            f(x).sum().backward()
            torch.cuda.synchronize()
            print(f"  step {step}: ok")
        except Exception as e:  # noqa: BLE001
            print(f"  step {step}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
        for i, g in enumerate(seen.values()):
            try:
                torch.rand(1, device="cuda", generator=g)
                what = "draws"
            except Exception as e:  # noqa: BLE001
                what = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
            print(f"    generator {i}: offset {g.get_offset()}: {what}")
    print(dict(fxslots.counters))
sys.stdout.flush()
