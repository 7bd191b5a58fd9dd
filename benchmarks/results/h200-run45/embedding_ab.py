"""Run 45b (session 30): an fp32 embedding's gradient under kernels="inductor", scattered into
its output buffer (passes/deliver.py) against the copied form (the rewrite switched off in the
same process), and torch.compile default: llama-small in fp32, batch 2 at sequence 512,
grads_in_arena off (the buffer), so the gradient's own bytes show. Per case: what it holds
between steps, the step's peak allocated above its start, ms/step (median [min-max] of 7
interleaved reps of 8 steps) and its ratio to torch.compile's."""
import copy
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.getcwd())
import fxslots  # noqa: E402
from examples.llama import SIZES, Llama, batch  # noqa: E402
from fxslots.passes import deliver  # noqa: E402

cfg = SIZES["llama-small"]
torch.manual_seed(0)
base = Llama(cfg).cuda()
data = batch(cfg, 2, 512, "cuda", torch.Generator(device="cuda").manual_seed(0))
over_zeros, current = deliver._over_zeros, [""]
# whenever a case's graphs are made (its first steps, a later capture), by the case running
deliver._over_zeros = lambda root: current[0] != "copied" and over_zeros(root)
cases, held = {}, {}
# one process per case for "held" (fxslots' regions share one graph pool: a second case's
# captures reuse the first's blocks); all three in one process for the paired timings
names = sys.argv[1:] or ["scattered", "copied", "inductor"]
for name in names:
    current[0] = name
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    m = copy.deepcopy(base)
    f = (torch.compile(m) if name == "inductor" else torch.compile(
        m, backend="fxslots", options={"slots": 1, "kernels": "inductor",
                                       "grads_in_arena": False}))
    for _ in range(4):
        f(*data).backward()
        m.zero_grad(set_to_none=True)
    cases[name] = (name, m, f)
    torch.cuda.synchronize()
    # what the case holds between steps: its parameters, and fxslots' arena, output buffer and
    # graph pool (a copied gradient's temporary is in the pool)
    held[name] = (torch.cuda.memory_allocated() - before) / 2**20


def step(name, m, f):
    current[0] = name
    f(*data).backward()
    m.zero_grad(set_to_none=True)


res = {n: {"ms": [], "peak_mib": None, "held_mib": held[n]} for n in cases}
for name, case in cases.items():
    torch.cuda.synchronize()
    start = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step(*case)
    torch.cuda.synchronize()
    res[name]["peak_mib"] = (torch.cuda.max_memory_allocated() - start) / 2**20
for r in range(7):
    for name in (list(cases) if r % 2 == 0 else list(cases)[::-1]):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(8):
            step(*cases[name])
        b.record()
        torch.cuda.synchronize()
        res[name]["ms"].append(a.elapsed_time(b) / 8)
print("case       | held MiB | step peak above start MiB | ms/step median [min-max] | x the last case")
for name, v in res.items():
    ratios = sorted(a / c for a, c in zip(v["ms"], res[names[-1]]["ms"], strict=True))
    print(f"{name:10} | {v['held_mib']:8.1f} | {v['peak_mib']:25.1f} | {statistics.median(v['ms']):6.2f} "
          f"[{min(v['ms']):.2f}-{max(v['ms']):.2f}] | {statistics.median(ratios):.3f} "
          f"[{ratios[0]:.3f}-{ratios[-1]:.3f}]")
print("grad_bytes_in_arena", fxslots.counters["grad_bytes_in_arena"])
json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"),
                           f"r45-embedding-{'-'.join(names)}.json"), "w"))
