"""fxslots against eager, torch.compile (default, reduce-overhead) and friends, one GPU.

Parts (``--parts``, comma-separated):
  speed    models x schedules x cases: ms/step (median and min-max over repetitions), peak and
           reserved memory, fxslots' captures and copies, gradients checked against eager
  host     host microseconds per forward and backward call on the launch-bound models
  warmup   compile+capture seconds over 16 sequence variants, then steady step time
           (fxslots dynamic=True, with and without fxslots.prepare; reduce-overhead)
  offload  activation offload: eager, save_on_cpu, fxslots offload=none/all/auto/budget,
           bytes moved, the link-bound minimum, copy/compute overlap from a profiler trace
  compile  first-compile seconds of aot_eager and fxslots on llama-small, static and dynamic
Models: heavy, launch-bound (MLPs), llama-small, llama-large (examples/llama.py); bf16.
Schedules: sequential, accum (zero_grad(set_to_none=False)), 1f1b, ffffbbbb (MLPs only).

Each case runs in its own process (forked from a server that has imported torch, so the start
is cheap; ``--start spawn`` for a fresh interpreter), under a timeout; a failing case is a row
with its error. JSON per part under --out, rewritten after every case.

    python benchmarks/bench.py --quick --out DIR                 # every part, ~7 minutes
    python benchmarks/bench.py --parts speed --models heavy,launch-bound --out DIR
    python benchmarks/bench.py --smoke --quick --out DIR          # tiny models on CPU
    python benchmarks/bench.py --quick --dry-run                  # the plan and its estimates
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_plan  # noqa: E402
import bench_rounds  # noqa: E402
import bench_report  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default=",".join(bench_plan.PARTS))
    ap.add_argument("--models", default=None, help="comma-separated; default: each part's own")
    ap.add_argument("--schedules", default=None, help="speed part: keep only these schedules")
    ap.add_argument("--cases", default=None,
                    help="keep only these backends (eager,inductor,reduce-overhead,fxslots,"
                         "aot_eager,save_on_cpu)")
    ap.add_argument("--fxslots-variants", default="[]",
                    help='JSON list of extra fxslots option sets, e.g. \'[{"kernels": "inductor"}]\'')
    ap.add_argument("--out", default="bench-out", help="directory for JSON and logs")
    ap.add_argument("--quick", action="store_true",
                    help="every part at reduced repetitions, within --budget-s (440 s)")
    ap.add_argument("--smoke", action="store_true", help="tiny models on CPU: checks the code")
    ap.add_argument("--budget-s", type=float, default=None, help="stop starting cases after this")
    ap.add_argument("--case-timeout-s", type=float, default=None)
    ap.add_argument("--reps", type=int, default=None, help="timed repetitions (preset's: 7, quick 5)")
    ap.add_argument("--steps", type=int, default=None, help="steps per repetition (12, quick 8)")
    ap.add_argument("--device", default=None, help="default: cuda if available (cpu for --smoke)")
    ap.add_argument("--start", default="forkserver", choices=("forkserver", "spawn"))
    ap.add_argument("--dry-run", action="store_true", help="print the plan and estimates only")
    ap.add_argument("--auto-shares", default="",
                    help="offload part: also run offload='auto:<share>' for these shares of "
                         "the link's time under compute, e.g. 0.85,0.7")
    ap.add_argument("--rounds", type=int, default=1,
                    help="speed part: run it this many times, rotating each group's backend "
                         "order, and pool the repetitions (bench_rounds.py)")
    ap.add_argument("--png", default=None, help="also chart the speed part (benchmarks/chart.py)")
    return ap.parse_args(argv)


def settings_of(args: argparse.Namespace) -> bench_plan.Settings:
    device = args.device or ("cpu" if args.smoke else _default_device())
    s = bench_plan.settings_for("quick" if args.quick else "full", args.smoke, device)
    if args.budget_s is not None:
        s = bench_plan.replace(s, budget_s=args.budget_s)
    if args.auto_shares:
        shares = tuple(float(x) for x in args.auto_shares.split(","))
        s = bench_plan.replace(s, auto_shares=shares)
    for name in ("case_timeout_s", "reps", "steps"):
        if getattr(args, name) is not None:
            s = bench_plan.replace(s, **{name: getattr(args, name)})
    return s


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def make_plan(args: argparse.Namespace, s: bench_plan.Settings) -> dict[str, list[dict]]:
    parts = [p for p in args.parts.split(",") if p]
    unknown = [p for p in parts if p not in bench_plan.PARTS]
    models = args.models.split(",") if args.models else None
    bad = [m for m in models or () if m not in bench_plan.MODELS]
    if unknown or bad:
        raise SystemExit(f"unknown part(s) {unknown} or model(s) {bad}; parts: "
                         f"{list(bench_plan.PARTS)}, models: {list(bench_plan.MODELS)}")
    plan = bench_plan.plan(parts, models, s, json.loads(args.fxslots_variants))
    keep_s = set(args.schedules.split(",")) if args.schedules else None
    keep_c = set(args.cases.split(",")) if args.cases else None
    for part, specs in plan.items():
        plan[part] = [c for c in specs
                      if (keep_s is None or part != "speed" or c["schedule"] in keep_s)
                      and (keep_c is None or c["backend"] in keep_c or c["model"] == "-")]
    if args.rounds > 1 and "speed" in plan:
        plan["speed"] = bench_rounds.interleave(plan["speed"], args.rounds)
    return plan


def print_estimates(plan: dict[str, list[dict]], s: bench_plan.Settings) -> dict[str, float]:
    """Each part's estimated seconds (an H200, full-size models), printed; returned."""
    est = {p: bench_plan.part_estimate(specs, s) for p, specs in plan.items()}
    where = ("tiny models on CPU: these H200 estimates do not apply" if s.smoke
             else "rough, for an H200; Llama compile times are guesses")
    print(f"plan ({s.preset}, reps {s.reps} x {s.steps} steps; {where}):")
    for p, specs in plan.items():
        run = [c for c in specs if not c.get("skip")]
        models = sorted({c["model"] for c in specs if c["model"] != "-"})
        print(f"  {p:<8} {len(run):>3} cases ({len(specs) - len(run)} skipped), "
              f"~{est[p]:5.0f} s  models: {', '.join(models) or 'none selected'}")
    budget = f", budget {s.budget_s:.0f} s" if s.budget_s else ""
    print(f"  total    ~{sum(est.values()):.0f} s{budget}; case timeout {s.case_timeout_s:.0f} s",
          flush=True)
    return est


class Runner:
    """Runs cases in their own processes, under the budget; writes each part's JSON."""

    def __init__(self, args: argparse.Namespace, s: bench_plan.Settings):
        self.args, self.s = args, s
        self.logs = os.path.join(args.out, "logs")
        os.makedirs(self.logs, exist_ok=True)
        here = os.path.dirname(os.path.abspath(__file__))
        # The fork server imports bench_cases from PYTHONPATH (Python 3.11's ignores sys.path).
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [here, os.path.dirname(here)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
        # torch.cuda.is_available() through NVML: a server that asks never initializes CUDA.
        os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
        self.ctx = mp.get_context(args.start)
        if args.start == "forkserver":
            self.ctx.set_forkserver_preload(["bench_cases"])
        self.deadline = time.monotonic() + s.budget_s if s.budget_s else None

    def left(self) -> float:
        return float("inf") if self.deadline is None else self.deadline - time.monotonic()

    def run_part(self, part: str, specs: list[dict], share: float) -> list[dict]:
        """Cases start while the budget holds and this part's share of it is not spent."""
        part_end = time.monotonic() + share
        rows: list[dict] = []
        for i, spec in enumerate(specs):
            spec = resolve(spec, rows)
            if spec.get("skip"):
                row = skipped(spec, spec["skip"])
            elif self.left() <= 5 or time.monotonic() >= part_end:
                row = skipped(spec, "not run: the --budget-s share of this part was spent")
            else:
                row = self.launch(spec, f"{part}-{i:02d}")
            finish(row, rows)
            rows.append(row)
            print(f"[{part} {i + 1}/{len(specs)}] {summary(row)}", flush=True)
            self.write(part, rows)
        return rows

    def launch(self, spec: dict, name: str) -> dict:
        row = self._launch(spec, name)
        error = row.get("error") or ""
        if self.ctx.get_start_method() == "forkserver" and any(t in error for t in FORK_TROUBLE):
            print(f"a forked case cannot use CUDA here ({error[:120]}): every case from now on "
                  "starts a fresh interpreter (--start spawn)", flush=True)
            self.ctx = mp.get_context("spawn")
            row = self._launch(spec, name)
        return row

    def _launch(self, spec: dict, name: str) -> dict:
        import bench_cases

        row_path = os.path.join(self.logs, name + ".row.json")
        log_path = os.path.join(self.logs, name + ".log")
        timeout = max(5.0, min(self.s.case_timeout_s, self.left()))
        if os.path.exists(row_path):  # an earlier run's row must not stand in for this one's
            os.remove(row_path)
        p = self.ctx.Process(target=bench_cases.child, args=(spec, row_path, log_path))
        t0 = time.monotonic()
        p.start()
        try:
            p.join(timeout)
        finally:  # also when this process is stopped (SIGTERM, ^C): the case must not outlive it
            timed_out = p.is_alive()
            if timed_out:
                _kill(p)
        row = _read_row(row_path, spec)
        row["case_wall_s"] = time.monotonic() - t0
        row["log"] = os.path.relpath(log_path, self.args.out)
        if timed_out:
            row["error"] = _join(row.get("error"), f"timed out after {timeout:.0f} s "
                                                   f"(stage: {row.get('stage')})")
        elif not row.get("done"):
            row["error"] = _join(row.get("error"), f"process died (exit code {p.exitcode}, "
                                                   f"stage {row.get('stage')}): {_tail(log_path)}")
        return row

    def write(self, part: str, rows: list[dict]) -> None:
        doc = {"part": part, "preset": self.s.preset, "smoke": self.s.smoke,
               "argv": sys.argv[1:], "settings": bench_plan.asdict(self.s), "rows": rows}
        path = os.path.join(self.args.out, f"{part}.json")
        with open(path + ".tmp", "w") as fh:
            json.dump(doc, fh, indent=1)
        os.replace(path + ".tmp", path)


FORK_TROUBLE = ("forked subprocess", "CUDA error: initialization error")


def _kill(p) -> None:
    """Kill the case's process group (it leads one), else the process alone."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        p.kill()
    p.join(10)


def _read_row(path: str, spec: dict) -> dict:
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {k: spec[k] for k in ("part", "model", "schedule", "case")} | {"error": None}


def _tail(path: str, n: int = 400) -> str:
    try:
        with open(path, errors="replace") as fh:
            return " ".join(fh.read()[-n:].split())
    except OSError:
        return ""


def _join(a: str | None, b: str) -> str:
    return f"{a}; {b}" if a else b


def resolve(spec: dict, rows: list[dict]) -> dict:
    """Fill in what a case takes from earlier rows: the offload budget is half the bytes that
    offload="none" saved per slot."""
    mode = spec.get("offload")
    if mode is None or mode != "half":
        return spec if mode is None else dict(spec, offload_value=mode)
    none = next((r for r in rows if r["model"] == spec["model"]
                 and r["case"] == "fxslots offload=none"), None)
    saved = (none or {}).get("largest_saved_bytes")
    if not saved:
        return dict(spec, skip="needs the saved bytes of offload=none, which it did not report")
    return dict(spec, offload_value=saved // 2, case=f"fxslots offload={saved // 2} (half)")


def finish(row: dict, rows: list[dict]) -> None:
    """Figures computed from several rows: the link-bound minimum of an offload case."""
    link = next((r for r in rows if r.get("case") == "host-link"), None)
    moved = row.get("offloaded_bytes_per_step")
    if link and link.get("h2d_gbps") and moved is not None:
        row["link_min_ms"] = moved / (link["d2h_gbps"] * 1e6) + moved / (link["h2d_gbps"] * 1e6)


def skipped(spec: dict, reason: str) -> dict:
    return {k: spec[k] for k in ("part", "model", "schedule", "case")} | {
        "skipped": reason, "error": None}


def summary(row: dict) -> str:
    name = " ".join(str(row[k]) for k in ("model", "schedule", "case") if row[k] != "-")
    if row.get("skipped"):
        return f"{name}: skipped ({row['skipped']})"
    figures = [f"{k} {row[k]:.4g}" for k in ("ms_per_step", "host_fwd_us", "warm_s",
                                               "first_step_s", "h2d_gbps", "d2h_gbps",
                                               "peak_alloc_gib", "max_grad_err")
               if isinstance(row.get(k), (int, float))]
    wall = f" ({row['case_wall_s']:.0f} s)" if row.get("case_wall_s") else ""
    err = f" ERROR {row['error'][:200]}" if row.get("error") else ""
    return f"{name}: {', '.join(figures)}{wall}{err}"


def run_parts(plan: dict[str, list[dict]], est: dict[str, float], runner: Runner,
              s: bench_plan.Settings) -> dict[str, list[dict]]:
    """Each part in turn, with its share of what is left of the budget; a table after each."""
    results = {}
    for i, (part, specs) in enumerate(plan.items()):
        rest = sum(est[p] for p in list(plan)[i:]) or 1.0
        share = runner.left() * est[part] / rest if s.budget_s else float("inf")
        print(f"\n== {part}: {len(specs)} cases" + (f", {share:.0f} s of the budget"
                                                      if s.budget_s else ""), flush=True)
        t0 = time.monotonic()
        results[part] = runner.run_part(part, specs, share)
        if any("round" in c for c in specs):
            results[part] = bench_rounds.merge(results[part])
            runner.write(part, results[part])
        print(f"\n{part}: {time.monotonic() - t0:.0f} s (estimated {est[part]:.0f} s)\n\n"
              + bench_report.text_table(part, results[part]), flush=True)
    return results


def print_plan(plan: dict[str, list[dict]]) -> None:
    for part, specs in plan.items():
        for c in specs:
            print(f"  {part}: {c['model']} {c['schedule']} {c['case']}"
                  + (f" (skipped: {c['skip']})" if c.get("skip") else ""))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    s = settings_of(args)
    plan = make_plan(args, s)
    est = print_estimates(plan, s)
    if args.dry_run:
        return print_plan(plan)
    # A case exits without tearing down (os._exit), leaving a semaphore that torch.compile made
    # to the resource tracker, which cleans it up and would warn about it: the tracker is started
    # with this process's -W options.
    sys.warnoptions.append("ignore:resource_tracker:UserWarning")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds through Runner.launch
    results = run_parts(plan, est, Runner(args, s), s)
    print("\n## Markdown\n")
    for part, rows in results.items():
        print(f"### {part}\n\n{bench_report.markdown_table(part, rows)}\n")
    print(f"wrote {', '.join(os.path.join(args.out, p + '.json') for p in results)}")
    if args.png and "speed" in results:
        from chart import render

        try:
            render(os.path.join(args.out, "speed.json"), args.png)
            print(f"wrote {args.png}")
        except ImportError as e:  # the JSON is written; the chart can be drawn elsewhere
            print(f"no chart: {e}")


if __name__ == "__main__":
    main()
