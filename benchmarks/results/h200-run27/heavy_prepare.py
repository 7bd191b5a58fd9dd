"""Run 27a: the heavy MLP, FFFFBBBB (four variants in flight, slots=4), trained with no
prepare, with the default prepare, and with prepare(in_flight=True): each slot's bytes, steady
peak and reserved memory, ms/step, captures in the timed steps, gradients against eager.
One mode per process (memory figures)."""
import json, os, statistics, sys
sys.path.insert(0, "benchmarks")
import torch
import bench_plan, bench_work
import fxslots

mode = sys.argv[1]
SMOKE = os.environ.get("SMOKE") == "1"  # tiny, on CPU: the script's own check
work = bench_work.Workload(bench_plan.model_config("heavy", SMOKE), "cpu" if SMOKE else "cuda")
f = bench_work.compile_case(work.model, "fxslots", {"slots": 4}, None)
mem = bench_work.Memory(work.device)
raw = bench_work.make_step("ffffbbbb", work, lambda: None)
step = bench_work.with_zero_grad(raw, work.model, "ffffbbbb")
if mode != "none":
    print(fxslots.prepare(f, [work.batches[s][0] for s in work.seqs], slots=4,
                          in_flight=mode == "in_flight"))
after_prepare = fxslots.counters["captures"]
for k in range(3):
    step(f, k)
bench_work.sync(work.device)
warm = fxslots.counters["captures"]
mem.peak_gib(reset=True)
times = bench_work.timed_reps(step, f, work.device, 5, 8)
row = dict(mode=mode, ms=statistics.median(times), spread=[min(times), max(times)],
           captures_after_prepare=after_prepare, captures_in_warmup=warm - after_prepare,
           captures_in_timed=fxslots.counters["captures"] - warm,
           slots=[s.nbytes / 2**30 for r in fxslots.regions() for s in r.ring.slots],
           steady_peak_gib=mem.peak_gib(), reserved_gib=mem.reserved_gib(),
           split=mem.reserved_split(), grad_err=bench_work.grad_error(work, f, raw))
print(json.dumps(row))
with open(os.path.join(os.environ.get("OUT", "/tmp"), f"r27a-heavy-{mode}.json"), "w") as fh:
    json.dump(row, fh)
