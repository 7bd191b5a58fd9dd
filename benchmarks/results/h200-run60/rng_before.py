"""Run 60c: what a checkpointed dropout did on CUDA before fxslots registered the generators
graph-safe RNG functionalization hands its graphs (the registration is switched off here), and
with it: warnings, counters, and whether each backward recomputed its own forward's mask."""
import sys
import warnings

import torch

import fxslots
from fxslots.runtime.cudagraphs import pool
from tests.test_cuda_checkpointed_rng import CheckpointedDropout, _expected_grads

registered = pool.register_generators
for label, register in (("without registering", lambda *a: None), ("registering", registered)):
    pool.register_generators = register
    fxslots.reset()
    torch.manual_seed(0)
    m = CheckpointedDropout().cuda()
    f = torch.compile(m, backend="fxslots", options={"slots": 2})
    g = torch.Generator(device="cuda").manual_seed(1)
    xs = [torch.randn(4, 32, 64, device="cuda", generator=g) for _ in range(2)]
    gs = [torch.randn(4, 32, 64, device="cuda", generator=g) for _ in range(2)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            for step in range(4):
                outs = [f(x) for x in xs]
                ys = [o.detach().clone() for o in outs]
                for o, gr in zip(reversed(outs), reversed(gs)):
                    (o * gr).sum().backward()
                w, _ = _expected_grads(m.lin, xs, ys, gs)
                err = ((m.lin.weight.grad - w).abs().max() / w.abs().max()).item()
                print(f"{label}: step {step}: weight grad error against its forwards' masks "
                      f"{err:.1e}", flush=True)
                m.zero_grad(set_to_none=True)
        except Exception as e:  # noqa: BLE001
            print(f"{label}: raised {type(e).__name__}: {str(e)[:600]}")
    for w in caught:
        if "fxslots" in str(w.message):
            print(f"{label}: warning: {str(w.message)[:400]}")
    print(f"{label}: counters", {k: v for k, v in fxslots.counters.items()
                                 if k in ("captures", "capture_failures", "uncaptured_graphs",
                                          "fallbacks", "compiles")})
sys.stdout.flush()
