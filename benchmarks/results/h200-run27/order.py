"""Run 27b: the order effect (26f-h, 27a: the same case reads ~9% slower after another case in
its process, even after 40 s idle). Per round, a new llama-small (sequence 512, offload none)
compiled after torch.compiler.reset() + fxslots.reset(): ms/step, host ms/step (steps issued
without a sync; the GPU queue is deep enough only if host-bound), and a cProfile of 16 steps,
top functions by own time, so two rounds' host costs can be compared function by function.
    python3 order.py fxslots fxslots eager eager   (backend per round)"""
import cProfile, io, os, pstats, statistics, sys, time
sys.path.insert(0, "benchmarks")
import torch
import bench_plan, bench_work
import fxslots

SMOKE = os.environ.get("SMOKE") == "1"
for rnd, backend in enumerate(sys.argv[1:] or ["fxslots", "fxslots"]):
    torch.compiler.reset(); fxslots.reset(); torch.manual_seed(0)
    work = bench_work.Workload(bench_plan.model_config("llama-small", SMOKE),
                               "cpu" if SMOKE else "cuda", seqs=(16,) if SMOKE else (512,))
    f = bench_work.compile_case(work.model, backend, {"slots": 1}, None)
    step = bench_work.with_zero_grad(bench_work.make_step("sequential", work, lambda: None),
                                     work.model, "sequential")
    for k in range(4):
        step(f, k)
    bench_work.sync(work.device)
    ms = statistics.median(bench_work.timed_reps(step, f, work.device, 5, 8))
    t0 = time.perf_counter()
    for k in range(16):
        step(f, k)
    host = (time.perf_counter() - t0) * 1e3 / 16
    bench_work.sync(work.device)
    prof = cProfile.Profile()
    prof.enable()
    for k in range(16):
        step(f, k)
    bench_work.sync(work.device)
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(14)
    busy = float("nan")
    if not SMOKE:  # the device's own time: kernels and copies, summed per step
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as tp:
            for k in range(4):
                step(f, k)
            torch.cuda.synchronize()
        busy = sum(getattr(e, "self_device_time_total", 0) for e in tp.key_averages()) / 4e3
    print(f"== round {rnd} {backend}: {ms:.3f} ms/step, host {host:.3f} ms/step, "
          f"device busy {busy:.3f} ms/step")
    print("\n".join(l for l in s.getvalue().splitlines()[6:] if l.strip()))
