"""H200 run 48: where offload="auto" spends its 3-4% on llama-small (run 47a: 1.039x none).

One process, one model copy per case (same weights), llama-small bf16 at batch 2, sequence 512,
slots=1, sequential steps. Each case is warmed up, timed (interleaved with the others, 11 x 8
steps), then profiled for 3 steps with CUDA activity only; the Chrome traces come back for an
offline comparison kernel by kernel (the compute stream's kernels are the same ATen kernels in
the same order in every case).

    python3 benchmarks/results/h200-run48/offload_trace.py OUT_DIR [case ...]
"""

import copy
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.getcwd())
import fxslots  # noqa: E402,F401
from examples.llama import SIZES, Llama, batch  # noqa: E402

out = sys.argv[1]
cases = sys.argv[2:] or ["none", "auto"]
cfg = SIZES["llama-small"]
torch.manual_seed(0)
base = Llama(cfg).cuda().to(torch.bfloat16)
data = batch(cfg, 2, 512, "cuda", torch.Generator(device="cuda").manual_seed(0))
runs = {}
for c in cases:
    m = copy.deepcopy(base)
    f = torch.compile(m, backend="fxslots", options={"slots": 1, "offload": c})

    def step(f=f, m=m):
        f(*data).backward()
        m.zero_grad(set_to_none=True)
    for _ in range(6):
        step()
    runs[c] = step
torch.cuda.synchronize()
ms = {c: [] for c in cases}
for r in range(11):
    for c in (cases if r % 2 == 0 else cases[::-1]):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(8):
            runs[c]()
        torch.cuda.synchronize()
        ms[c].append((time.perf_counter() - t0) / 8 * 1e3)
summary = {c: {"median_ms": statistics.median(v), "ms": v} for c, v in ms.items()}
for c in cases:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            runs[c]()
            torch.cuda.synchronize()
    prof.export_chrome_trace(os.path.join(out, f"trace-{c.replace(':', '_')}.json"))
print(json.dumps({c: round(s["median_ms"], 3) for c, s in summary.items()}))
with open(os.path.join(out, "summary.json"), "w") as fh:
    json.dump(summary, fh, indent=1)
