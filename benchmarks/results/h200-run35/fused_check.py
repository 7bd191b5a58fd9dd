"""Run 35: does heavy's captured accumulating backward fuse its weight gradients (addmm_), and
what is the gradient error once a fused replay has run? bench.py's gradient check reported 0.0
for grad_accumulation="fused" on the H200 (runs 34c, 34f). Here each step's error against an
eager twin is printed with the count of replays, step by step from no .grad, for "graph" and
"fused", so the first fused replay is visible.

    python benchmarks/results/h200-run35/fused_check.py [--smoke]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import torch  # noqa: E402

import fxslots  # noqa: E402
from bench_plan import MODELS, SMOKE_MODELS  # noqa: E402
from bench_work import Workload, compile_case  # noqa: E402
from fxslots.grads import _fused  # noqa: E402


REPLAYS = [0]
if torch.cuda.is_available():
    _replay = torch.cuda.CUDAGraph.replay

    def _counted(self):
        REPLAYS[0] += 1
        return _replay(self)

    torch.cuda.CUDAGraph.replay = _counted


def check(mode: str, smoke: bool) -> None:
    fxslots.reset()
    cfg = (SMOKE_MODELS if smoke else MODELS)["heavy"]
    seq = cfg["seqs"][-1]
    # a new microbatch each step: with one batch every step adds the same gradient G, and
    # round(G + k round(G)) equals round((k + 1) round(G)) for the first k, fused or not
    work = Workload(cfg, "cpu" if smoke else "cuda", seqs=(seq,), microbatches=6)
    f = compile_case(work.model, "fxslots", {"grad_accumulation": mode}, None)
    ref = work.twin()
    for mod in (work.model, ref):
        for p in mod.parameters():
            p.grad = None
    for k in range(6):
        work.loss(f, seq, k).backward()
        work.loss(ref, seq, k).backward()
        err = 0.0
        for a, b in zip(work.model.parameters(), ref.parameters(), strict=True):
            scale = b.grad.float().abs().max().item() or 1.0
            err = max(err, (a.grad.float() - b.grad.float()).abs().max().item() / scale)
        keys = sorted({(key.direction.value, key.accumulate) for r in fxslots.regions()
                       for v in r.live_variants() for key in getattr(v.executor, "graphs", ())})
        fused = [_fused(v.accumulate.captured) for r in fxslots.regions()
                 for v in r.live_variants()
                 if v.accumulate is not None and v.accumulate.captured is not None]
        print(f"{mode:6s} step {k}: captures {fxslots.counters['captures']:3d} "
              f"replays {REPLAYS[0]:3d} rel grad err {err:.3e} "
              f"addmm_ per captured accumulating graph {fused}; graphs {keys}", flush=True)


if __name__ == "__main__":
    for mode in ("graph", "fused"):
        check(mode, "--smoke" in sys.argv)
