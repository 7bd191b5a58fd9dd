"""Run 31 probe: reserved memory after 12 sequential steps (single shape, slots=1), with and
without the cached segments released before each capture (pool.release_cached), beside eager.

    python benchmarks/results/h200-run31/release_ab.py heavy 2048 {eager|release|keep}
"""
import json
import sys

import torch

sys.path.insert(0, "benchmarks")
from bench_plan import MODELS  # noqa: E402
from bench_work import Memory, Workload, compile_case, make_step, mark_for, with_zero_grad  # noqa: E402

from fxslots.runtime.cudagraphs import pool as P  # noqa: E402

model, seq, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if mode == "keep":
    P.release_cached = lambda: None
work = Workload(MODELS[model], "cuda", seqs=(seq,), microbatches=4)
backend = "eager" if mode == "eager" else "fxslots"
f = compile_case(work.model, backend, {"slots": 1} if backend == "fxslots" else {}, None)
mem = Memory(work.device)
run = with_zero_grad(make_step("sequential", work, mark_for(backend)), work.model, "sequential")
for k in range(12):
    run(f, k)
torch.cuda.synchronize()
row = {"model": model, "mode": mode, "reserved_gib": round(mem.reserved_gib(), 4),
       "peak_gib": round(mem.peak_gib(), 4), **mem.reserved_split()}
print(json.dumps(row))
