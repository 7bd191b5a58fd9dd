"""Run 26c: where offload="auto" loses time against "none" (issue 10), from profiler traces.

For llama-small at sequence 512 (the offload part's case), each of none / auto / all: compile,
warm up, trace 4 steps, then per stream the merged kernel time, and on the compute stream (the
one with the most kernel time) the idle gaps between kernels: their total, and the largest with
the kernels on either side. A step that is slower with offload either runs its kernels longer
(contention) or waits (a gap: a join, a reload's wait). Args: [model] [seq].
"""
import collections, json, os, sys, tempfile
sys.path.insert(0, "benchmarks")
import torch
import bench_plan, bench_work
from bench_trace import merge

MODEL = sys.argv[1] if len(sys.argv) > 1 else "llama-small"
SEQ = int(sys.argv[2]) if len(sys.argv) > 2 else bench_plan.OFFLOAD_SEQ[MODEL]
STEPS = 4


def trace(offload):
    import fxslots
    fxslots.reset(); torch.compiler.reset(); torch.manual_seed(0)
    work = bench_work.Workload(bench_plan.model_config(MODEL, False), "cuda", seqs=(SEQ,))
    f = bench_work.compile_case(work.model, "fxslots", {"slots": 1, "offload": offload}, None)
    step = bench_work.with_zero_grad(bench_work.make_step("sequential", work, lambda: None),
                                     work.model, "sequential")
    for k in range(4):
        step(f, k)
    ms = bench_work.timed_reps(step, f, work.device, 3, 8)
    with tempfile.TemporaryDirectory() as d:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for k in range(STEPS):
                step(f, k)
            torch.cuda.synchronize()
        path = os.path.join(d, "t.json")
        prof.export_chrome_trace(path)
        with open(path) as fh:
            ev = json.load(fh)["traceEvents"]
    return sorted(ms)[1], ev


def analyse(name, ms, ev):
    dev = [e for e in ev if "dur" in e and "ts" in e and str(e.get("cat", "")).lower() in
           ("kernel", "gpu_memcpy", "gpu_memset")]
    by = collections.defaultdict(list)
    for e in dev:
        by[(e.get("args") or {}).get("stream", e.get("tid"))].append(e)
    span = max(e["ts"] + e["dur"] for e in dev) - min(e["ts"] for e in dev)
    print(f"== {name}: {ms:.3f} ms/step (median of 3 reps x 8); traced {STEPS} steps span "
          f"{span / 1000:.2f} ms")
    busy = {s: sum(b - a for a, b in merge((e["ts"], e["ts"] + e["dur"]) for e in es))
            for s, es in by.items()}
    for s, es in sorted(by.items(), key=lambda kv: -busy[kv[0]]):
        kinds = collections.Counter(str(e.get("cat")).lower() for e in es)
        mb = sum((e.get("args") or {}).get("bytes", 0) for e in es) / 2**20
        print(f"  stream {s}: busy {busy[s] / STEPS / 1000:.3f} ms/step, {dict(kinds)}, "
              f"{mb / STEPS:.1f} MiB copied/step")
    main = max(busy, key=busy.get)
    es = sorted(by[main], key=lambda e: e["ts"])
    gaps = [(b["ts"] - (a["ts"] + a["dur"]), a, b) for a, b in zip(es, es[1:])]
    small = sum(g for g, _, _ in gaps if 0 < g <= 1000)
    print(f"  compute stream {main}: gaps <= 1 ms total {small / STEPS / 1000:.3f} ms/step; "
          f"gaps > 1 ms (between steps) {sum(1 for g, _, _ in gaps if g > 1000)}")
    top = sorted((g for g in gaps if 0 < g[0] <= 1000), key=lambda g: -g[0])[:12]
    for g, a, b in top:
        print(f"    {g:8.1f} us  after {a['name'][:60]!r}  before {b['name'][:60]!r}")
    hist = collections.Counter()
    for g, a, b in gaps:
        if 0 < g <= 1000:
            hist[b["name"][:50]] += g
    print("  gap time by the kernel that follows (us/step):")
    for k, v in hist.most_common(8):
        print(f"    {v / STEPS:8.1f}  {k}")


for offload in ("none", "auto", "all"):
    ms, ev = trace(offload)
    analyse(f"offload={offload}", ms, ev)
