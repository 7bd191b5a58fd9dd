"""Run 26d: the device-to-device copies offload="auto" adds on the compute stream (26c found
~104 MiB a step, none in offload="none"): sizes, neighbours, in which graph; and fxslots'
counters and plan for the case."""
import collections, json, os, sys, tempfile
sys.path.insert(0, "benchmarks")
import torch
import bench_plan, bench_work
import fxslots

for OFF in (sys.argv[1:] or ["auto"]):
    if OFF.startswith("sleep"):  # an idle pause: does the next case read faster after it?
        import time; time.sleep(float(OFF[5:])); continue
    torch.compiler.reset()
    fxslots.reset(); torch.manual_seed(0)
    if os.environ.get("EMPTY") == "1":
        import gc; gc.collect(); torch.cuda.synchronize(); torch.cuda.empty_cache()
    work = bench_work.Workload(bench_plan.model_config("llama-small", False), "cuda", seqs=(512,))
    f = bench_work.compile_case(work.model, "fxslots", {"slots": 1, "offload": OFF}, None)
    step = bench_work.with_zero_grad(bench_work.make_step("sequential", work, lambda: None),
                                     work.model, "sequential")
    with fxslots.report.recording() as recs:
        for k in range(4):
            step(f, k)
    torch.cuda.synchronize()
    print(OFF, "ms/step", sorted(bench_work.timed_reps(step, f, work.device, 3, 8))[1])
    print("counters", dict(fxslots.counters))
    for r in recs:
        if r.plan is None or OFF == "none":
            print("fallback", r.fallback); continue
        off = [p for p in r.plan.placements if p.write.value == "offload"]
        print(f"plan: {len(r.plan.placements)} groups, {len(off)} offloaded, offloaded bytes {r.plan.offloaded_bytes}")
        print("  forward copy_ nodes", sum("copy_(" in l for l in r.forward_after.splitlines()),
              "offload nodes", sum("offload(" in l for l in r.forward_after.splitlines()))
    if os.environ.get("PROFILE") == "0":
        continue
    with tempfile.TemporaryDirectory() as d:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA,
                                                torch.profiler.ProfilerActivity.CPU]) as prof:
            step(f, 0)
            step(f, 1)
            torch.cuda.synchronize()
        path = os.path.join(d, "t.json"); prof.export_chrome_trace(path)
        ev = json.load(open(path))["traceEvents"]
    dev = sorted([e for e in ev if "dur" in e and str(e.get("cat", "")).lower() in ("kernel", "gpu_memcpy", "gpu_memset")], key=lambda e: e["ts"])
    dtod = [e for e in dev if "DtoD" in e["name"]]
    print(f"{len(dtod)} DtoD copies in one step, {sum((e.get('args') or {}).get('bytes', 0) for e in dtod)/2**20:.1f} MiB")
    sizes = collections.Counter((e.get("args") or {}).get("bytes", 0) for e in dtod)
    print("sizes", sizes.most_common(10))
    # the CPU op that launched each (correlation id)
    corr = {}
    for e in ev:
        if str(e.get("cat", "")).lower() in ("cuda_runtime", "cuda_driver") and "args" in e:
            corr[e["args"].get("correlation")] = e
    ops = [e for e in ev if str(e.get("cat", "")).lower() == "cpu_op"]
    launch = collections.Counter()
    for e in dtod:
        r = corr.get((e.get("args") or {}).get("correlation"))
        if r is None:
            launch["?"] += 1; continue
        ts = r["ts"]
        inner = [o for o in ops if o["ts"] <= ts <= o["ts"] + o["dur"]]
        inner.sort(key=lambda o: o["dur"])
        launch[(r["name"], " < ".join(o["name"] for o in inner[:4]))] += 1
    for k, v in launch.most_common(10):
        print(v, k)
    