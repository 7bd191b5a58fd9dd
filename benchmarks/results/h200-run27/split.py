"""Run 27b: where offload="auto" spends its ~6% on llama-small (27a, paired: 1.059x none).
Both cases in this process (paired.build_case), steps interleaved; per step: host ms of the
forward call and of backward(), and device ms between CUDA events recorded before the forward,
between forward and backward, and after the backward. A forward graph slowed by its copies, a
backward waiting on reloads, or host time would each show in its own column. The device
columns time queued work: a 20 ms torch.cuda._sleep goes first, so the host has issued the
whole step before the GPU reaches the first event."""
import os, statistics, sys, time
sys.path.insert(0, "benchmarks")
import torch
import paired

SMOKE = os.environ.get("SMOKE") == "1"
specs = sys.argv[1:] or ["fxslots+offload=auto", "fxslots"]
cases = {}
for spec in specs:
    backend, _, options = paired.parse_backend(spec)
    run, f, work, _ = paired._case("llama-small", "sequential", backend, SMOKE, options)
    cases[spec] = (f, work)
rows = {spec: [] for spec in specs}
dev = torch.cuda.is_available() and not SMOKE
for k in range(40):
    for spec in (specs if k % 2 == 0 else specs[::-1]):
        f, work = cases[spec]
        s = work.seqs[k % len(work.seqs)]
        if dev:
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
            torch.cuda.synchronize()
            torch.cuda._sleep(40_000_000)  # ~20 ms at the H200's ~2 GHz
            ev[0].record()
        t0 = time.perf_counter()
        loss = work.loss(f, s)
        t1 = time.perf_counter()
        if dev:
            ev[1].record()
        loss.backward()
        t2 = time.perf_counter()
        if dev:
            ev[2].record()
        work.model.zero_grad(set_to_none=True)
        if dev:
            torch.cuda.synchronize()
        t3 = time.perf_counter()
        d = [ev[0].elapsed_time(ev[1]), ev[1].elapsed_time(ev[2])] if dev else [0.0, 0.0]
        if k >= 4:
            rows[spec].append(((t1 - t0) * 1e3, (t2 - t1) * 1e3, *d, (t3 - t0) * 1e3))
print(f"{'case':<22} host fwd | host bwd | dev fwd | dev bwd | wall (with the sleep)"
      "  (ms, medians of 36)")
for spec, r in rows.items():
    med = [statistics.median(c) for c in zip(*r)]
    print(f"{spec:<22} " + " | ".join(f"{m:7.3f}" for m in med))
