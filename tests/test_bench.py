"""benchmarks/bench.py's pure parts: the plan, the copy/compute overlap of a trace, the tables;
and one tiny speed case run in this process on CPU (the figures read from fxslots' regions)."""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))

import bench  # noqa: E402
import bench_plan  # noqa: E402
import bench_report  # noqa: E402
import bench_trace  # noqa: E402


def _ev(cat, name, ts, dur, stream, nbytes=None):
    args = {"stream": stream} | ({"bytes": nbytes} if nbytes is not None else {})
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": args}


def test_copy_overlap_counts_kernels_on_other_streams_only():
    trace = {"traceEvents": [
        _ev("kernel", "gemm", 0, 10, 7), _ev("kernel", "gelu", 20, 10, 7),
        _ev("kernel", "side", 5, 20, 8),
        _ev("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 0, 12, 8, 1000),
        _ev("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 8, 14, 9, 500),
        _ev("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 0, 100, 9, 7),
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 50},
    ]}
    out = bench_trace.copy_overlap(trace)
    # DtoH on stream 8: stream 7's kernels cover [0, 10] of [0, 12]; its own stream does not count.
    assert out["d2h"] == {"copy_us": 12.0, "overlap_us": 10.0, "bytes": 1000, "copies": 1}
    # HtoD on stream 9: streams 7 and 8 together cover all of [8, 22].
    assert out["h2d"] == {"copy_us": 14.0, "overlap_us": 14.0, "bytes": 500, "copies": 1}
    assert out["overlap_fraction"] == pytest.approx(24 / 26)
    assert bench_trace.copy_overlap({"traceEvents": []}) == {"overlap_fraction": None}


def test_merge_and_covered():
    union = bench_trace.merge([(5, 7), (0, 2), (1, 3), (7, 8), (9, 9)])
    assert union == [(0, 3), (5, 8)]
    assert bench_trace.covered((2, 6), union) == 2


def _settings(preset="quick", device="cuda", smoke=False):
    return bench_plan.settings_for(preset, smoke, device)


def test_quick_plan_covers_every_part_within_its_budget():
    s = _settings()
    plan = bench_plan.plan(list(bench_plan.PARTS), None, s, [])
    assert all(plan[p] for p in bench_plan.PARTS)
    assert sum(bench_plan.part_estimate(c, s) for c in plan.values()) <= s.budget_s
    json.dumps(plan)  # a case travels to its process as JSON
    speed = {(c["model"], c["schedule"]) for c in plan["speed"]}
    assert {sch for m, sch in speed if m == "launch-bound"} == set(bench_plan.SCHEDULES)
    assert {sch for m, sch in speed if m == "llama-large"} == {"sequential", "accum"}
    assert {c["case"] for c in plan["warmup"]} >= {"fxslots dynamic=True + prepare",
                                                   "reduce-overhead dynamic=True"}


def test_full_plan_slots_schedules_and_variants():
    s = _settings("full")
    plan = bench_plan.plan(["speed"], ["llama-small", "heavy"], s, [{"kernels": "inductor"}])
    cases = plan["speed"]
    assert not any(c["schedule"] == "ffffbbbb" for c in cases if c["model"] == "llama-small")
    fx = [c for c in cases if c["backend"] == "fxslots"]
    assert {(c["schedule"], c["options"]["slots"]) for c in fx if c["model"] == "heavy"} == {
        ("sequential", 1), ("accum", 1), ("1f1b", 2), ("ffffbbbb", 4)}
    variant = next(c for c in fx if c["case"] == "fxslots kernels=inductor")
    assert variant["options"] == {"slots": 1, "kernels": "inductor"}
    assert cases[cases.index(variant) - 1]["case"] == "fxslots"  # right after its base case


def test_cuda_only_cases_are_skipped_rows_off_cuda():
    plan = bench_plan.plan(["speed", "offload"], ["heavy"], _settings(device="cpu", smoke=True),
                           [])
    skipped = {c["case"] for p in plan.values() for c in p if c.get("skip")}
    assert skipped == {"reduce-overhead", "host-link"}
    assert any(c["case"] == "aot_eager" for c in plan["speed"])
    assert all(c["cfg"]["H"] == 64 for c in plan["speed"])  # the tiny heavy MLP


def test_offload_budget_is_half_of_none_and_link_minimum():
    spec = {"model": "heavy", "case": "x", "offload": "half"}
    rows = [{"model": "heavy", "case": "fxslots offload=none", "largest_saved_bytes": 1000}]
    assert bench.resolve(spec, rows)["offload_value"] == 500
    assert "skip" in bench.resolve(spec, [])
    assert bench.resolve({"offload": "all"}, [])["offload_value"] == "all"
    link = {"case": "host-link", "h2d_gbps": 50.0, "d2h_gbps": 25.0}
    row = {"offloaded_bytes_per_step": 10**8}
    bench.finish(row, [link])
    assert row["link_min_ms"] == pytest.approx(4.0 + 2.0)


ROWS = [
    {"model": "m", "schedule": "sequential", "case": "eager", "ms_per_step": 4.0,
     "ms_per_step_min": 3.9, "ms_per_step_max": 4.2, "max_grad_err": 0.0},
    {"model": "m", "schedule": "sequential", "case": "reduce-overhead", "ms_per_step": 2.0,
     "ms_per_step_min": 2.0, "ms_per_step_max": 2.1, "max_grad_err": 3e20},
    {"model": "m", "schedule": "sequential", "case": "fxslots", "ms_per_step": 1.0,
     "ms_per_step_min": 1.0, "ms_per_step_max": 1.5, "copy_free_fraction": 1.0, "captures": 8,
     "error": None},
    {"model": "m", "schedule": "accum", "case": "reduce-overhead", "error": "RuntimeError: x\ny"},
    {"model": "m", "schedule": "accum", "case": "inductor", "skipped": "CUDA only"},
]


def test_tables_show_ratios_spreads_errors_and_skips():
    text = bench_report.text_table("speed", ROWS)
    lines = text.splitlines()
    assert lines[0].startswith("model") and len(lines) == 3 + len(ROWS)
    assert "in use GiB" in lines[0] and lines[-1].startswith("peak: allocated bytes")
    fx = next(ln for ln in lines if "| fxslots" in ln)
    assert "1.00 [1.00-1.50]" in fx and "| 0.25 " in fx and "| 0.50 " in fx and "100%" in fx
    assert "3.0e+20 WRONG" in text and "RuntimeError: x" in text and "skipped: CUDA only" in text
    md = bench_report.markdown_table("speed", ROWS)
    assert md.splitlines()[1].startswith("|---|") and md.count("\n") == 2 + len(ROWS)


def test_a_row_whose_graphs_inductor_refused_says_so():
    """Run 38d timed a kernels="inductor" row whose forwards Inductor had refused (they ran
    ATen kernels) with nothing in the table to say so: the row now says it."""
    row = dict(model="m", schedule="sequential", case="fxslots kernels=inductor",
               ms_per_step=1.0, inductor_fallbacks=2)
    text = bench_report.text_table("speed", [row])
    assert "Inductor refused 2 graph(s), ATen kernels ran them" in text
    assert "Inductor refused" not in bench_report.text_table("speed", [dict(row, inductor_fallbacks=0)])


def test_error_text_names_the_root_cause():
    from bench_work import error_text

    try:
        try:
            raise ValueError("inner\n\nSet TORCHDYNAMO_VERBOSE=1 for more")
        except ValueError as e:
            raise RuntimeError("outer") from e
    except RuntimeError as e:
        assert error_text(e) == "ValueError: inner (raised through RuntimeError)"


def test_one_speed_case_on_cpu_reads_fxslots_figures():
    import fxslots
    from bench_cases import run_speed

    s = _settings("quick", device="cpu", smoke=True)
    spec = next(c for c in bench_plan.plan(["speed"], ["launch-bound"], s, [])["speed"]
                if c["schedule"] == "1f1b" and c["backend"] == "fxslots")
    spec["settings"] = dict(spec["settings"], reps=2, steps=2, warm_passes=1)
    row: dict = {"stage": None}
    fxslots.reset()
    try:
        run_speed(spec, row, lambda: None)
    finally:
        fxslots.reset()
    assert len(row["ms_per_step_reps"]) == 2 and row["ms_per_step"] > 0
    assert row["n_slots"] == 2 and row["copy_free_fraction"] == 1.0
    assert row["copied_bytes_per_forward"] == 0 and row["max_grad_err"] == 0.0
    assert row["inductor_fallbacks"] == 0


def test_held_output_case_on_cpu_checks_gradients_and_prints_a_row():
    import fxslots
    import held_output

    fxslots.reset()
    try:
        row = held_output.run_case("fxslots", "held", "heavy", 16, 2, 2, smoke=True)
    finally:
        fxslots.reset()
    assert len(row["ms_per_step_reps"]) == 2 and row["max_grad_err"] == 0.0
    assert row["copied_out_mib_per_step"] == 0 and row["captures_timed"] == 0
    eager = dict(row, backend="eager", loop="held")
    text = held_output.table([eager, dict(row, backend="fxslots", loop="held"),
                              {"backend": "reduce-overhead", "loop": "held", "error": "boom"}])
    assert "fxslots | held" in text and "1.000" in text and "boom" in text


def test_rounds_rotate_each_groups_order_and_pool_the_repetitions():
    import bench_rounds

    specs = [dict(model=m, schedule="seq", case=c) for m in ("a", "b") for c in ("x", "y", "z")]
    order = [(c["model"], c["case"], c["round"]) for c in bench_rounds.interleave(specs, 3)]
    assert order[:6] == [("a", "x", 0), ("a", "y", 0), ("a", "z", 0),
                         ("b", "x", 0), ("b", "y", 0), ("b", "z", 0)]
    assert [c for m, c, r in order if m == "a" and r == 1] == ["y", "z", "x"]
    assert [c for m, c, r in order if m == "b" and r == 2] == ["z", "x", "y"]

    def row(case, reps, error=None):
        return dict(model="a", schedule="seq", case=case, ms_per_step=sorted(reps)[1],
                    ms_per_step_reps=reps, error=error)

    rows = bench_rounds.merge([row("x", [1, 2, 3]), row("y", [5, 6, 7]),
                               row("y", [9, 8, 10], error="boom"), row("x", [4, 5, 6])])
    assert [(r["case"], r["rounds"], r["ms_per_step"], r["ms_per_step_min"],
             r["ms_per_step_max"], r["round_medians"], r["error"]) for r in rows] == [
        ("x", 2, 3.5, 1, 6, [2, 5], None), ("y", 2, 7.5, 5, 10, [6, 9], "boom")]
    # Each round's median over the base case's in that round: the pairs, not the pools.
    base = dict(model="a", schedule="seq", case="reduce-overhead", round_medians=[4, 5])
    rows[0]["case"] = "fxslots"
    text = bench_report.text_table("speed", [rows[0], base])
    assert "0.75 [0.50-1.00]" in text.splitlines()[2]  # 2/4 and 5/5


def test_paired_backends_alternate_in_one_process_on_cpu(capsys):
    import paired

    res = paired.paired("launch-bound", "sequential", ["aot_eager", "eager"], 3, 2, smoke=True)
    assert [len(v) for v in res["ms_per_step"].values()] == [3, 3]
    assert res["ratios"]["eager"] == {"median": 1.0, "min": 1.0, "max": 1.0}
    assert res["max_grad_err"] == {"aot_eager": 0.0, "eager": 0.0}
    assert res["forward_ms"] == {"aot_eager": None, "eager": None}  # CUDA events only
    assert "x eager median" in paired.table(res)
    # progress as it goes, for a run its time limit kills before the table
    lines = capsys.readouterr().out.splitlines()
    assert [x.split(" in ")[0] for x in lines[:2]] == [
        "aot_eager: compiled and warmed up", "eager: compiled and warmed up"]
    assert [x.split(":")[0] for x in lines[2:]] == [f"repetition {r}/3" for r in (1, 2, 3)]


def test_paired_backends_all_start_from_a_dynamic_graph():
    """Without the priming the first backend compiles twice (a static graph for its first
    variant), the second once."""
    import paired

    res = paired.paired("llama-small", "sequential", ["fxslots", "fxslots+memsets=nodes"], 1, 1,
                        smoke=True)
    assert [c["compiles"] for c in res["warmup_counters"].values()] == [1, 1]
    # each backend's plan counts its own compiles, not the process's so far
    assert [p["compiles"] for p in res["plans"].values()] == [1, 1]


def test_paired_says_when_a_backend_was_not_steady():
    """Run 54d's Inductor base (8.7% from quartile to quartile: its ratios were noise) against
    run 54's ATen base (0.3%) and a steady run with one slow step (run 53f's heavy base)."""
    import paired

    def res(base_ms):
        return {"model": "m", "schedule": "s", "reps": len(base_ms), "steps": 8, "base": "b",
                "ms_per_step": {"a": [1.0] * len(base_ms), "b": base_ms},
                "ratios": {k: {"median": 1.0, "min": 1.0, "max": 1.0} for k in "ab"},
                "max_grad_err": {"a": 0.0, "b": 0.0}}

    r54d = [2.82, 2.82, 3.30, 3.03, 2.98, 2.94, 3.39, 3.28, 3.01, 2.85, 3.21, 3.21, 3.25, 3.11,
            3.21]
    assert "unsteady: b's own steps spread 8.7%" in paired.table(res(r54d))
    assert "unsteady" not in paired.table(res([5.37, 5.34, 5.40, 5.38, 5.40, 5.38, 5.39]))
    r53f = [6.81, 6.84, 6.77, 6.86, 6.80, 6.72, 7.28, 8.06, 6.94]
    assert "unsteady" not in paired.table(res(r53f))
    assert paired.own_spread([1.0, 1.1, 1.2, 1.3, 1.4]) == pytest.approx(0.2 / 1.2)


def test_paired_stops_adding_repetitions_that_would_end_past_its_seconds():
    import paired

    res = paired.paired("launch-bound", "sequential", ["eager"], 5, 1, smoke=True, seconds=0)
    assert res["reps"] == 1 and len(res["ms_per_step"]["eager"]) == 1
    assert paired._time_for_another(None, 1e9)
    assert not paired._time_for_another(0.0, 0.0)  # the deadline has passed


def test_paired_link_capacity_is_bytes_over_the_link_in_the_base_forward():
    """Offload's share of the link: 55 MB a forward, against a 50 GB/s link (the slower of two
    devices) over the base's 2 ms forward (100 MB), is 0.55; a backend that offloads nothing
    is 0.00, one not planned by fxslots has none."""
    import paired

    res = {"base": "fxslots", "forward_ms": {"fxslots": 2.0, "auto": 1.5},
           "link_bytes_per_s": {"0": 55e9, "1": 50e9},
           "plans": {"auto": {"offloaded_bytes_per_forward": 55e6},
                     "fxslots": {"offloaded_bytes_per_forward": 0}}}
    assert [paired._capacity(res, b) for b in ("auto", "fxslots", "eager")] == [
        "0.55", "0.00", "-"]


def test_paired_backend_specs_name_a_schedule_and_options():
    import paired

    assert paired.parse_backend("fxslots") == ("fxslots", None, {})
    assert paired.parse_backend("fxslots:accum+offload=auto+slots=2") == (
        "fxslots", "accum", {"offload": "auto", "slots": 2})
    with pytest.raises(SystemExit, match="options are \\+name=value"):
        paired.parse_backend("fxslots+offload")


def test_paired_options_reach_the_compiled_case_on_cpu():
    import paired

    import fxslots
    run, f, work, _ = paired.build_case("launch-bound", "sequential", "fxslots", smoke=True,
                                        options={"offload": "all"})
    with fxslots.report.recording() as records:
        run(f, 0)
    assert records and all(r.plan.offloaded_bytes != 0 for r in records if r.plan is not None)


def test_paired_warm_up_variants_compile_dynamic_where_asked_on_cpu():
    """``--warmup-seqs`` with ``+dynamic=true``: one compile serves the 16 variants, each warmed
    up before timing, and the gradients still match eager's."""
    import paired

    import fxslots
    from bench_plan import SMOKE_WARMUP_SEQS

    before = fxslots.counters["compiles"]
    res = paired.paired("launch-bound", "sequential", ["fxslots+dynamic=true", "eager"], 2, 2,
                        smoke=True, seqs=SMOKE_WARMUP_SEQS)
    assert res["seqs"] == SMOKE_WARMUP_SEQS and len(SMOKE_WARMUP_SEQS) == 16
    assert fxslots.counters["compiles"] - before <= 2  # forward + backward, not one per shape
    assert res["max_grad_err"]["fxslots+dynamic=true"] == 0.0


def test_paired_counts_what_each_backend_did_while_warming_up():
    """fxslots' counters are one per process: each backend's share is what moved while it
    compiled and warmed up (a backend that is not fxslots moves none)."""
    import paired

    res = paired.paired("launch-bound", "sequential", ["fxslots", "eager"], 1, 1, smoke=True)
    ours = res["warmup_counters"]["fxslots"]
    assert ours and all(v > 0 for v in ours.values()) and res["warmup_counters"]["eager"] == {}
    assert paired._counted_since({"a": 1, "b": 2}, {"a": 1, "b": 5, "c": 1}) == {"b": 3, "c": 1}
    assert "fxslots warming up: " in paired.table(res)


def test_bf16_rounding_is_not_called_wrong():
    """torch.compile's default reads 2.1e-2 from eager on llama-large 1F1B in bf16, where the
    same schedule in fp32 reads 1.5e-6 (H100 runs 59b-c): rounding, not wrong gradients."""
    rows = [dict(ROWS[0], max_grad_err=2.1e-2), dict(ROWS[0], max_grad_err=0.2)]
    lines = bench_report.text_table("speed", rows).splitlines()
    assert "2.1e-02 " in lines[2] and "WRONG" not in lines[2]
    assert "2.0e-01 WRONG" in lines[3]


def test_profile_tables_leave_out_the_profilers_annotations(capsys):
    """A compiled graph's call and a record_function put spans on the device's timeline that
    cover kernels and the gaps between them: no device work (run 60a's first tables counted
    them). The tables drop them, per phase too, and sum what is left."""
    import profile_kernels

    def case(name, gemm_us):
        kernels = {"nvjet_sm90_tst_256x128": {"us_per_step": gemm_us, "calls_per_step": 1},
                   "## Call CompiledFxGraph f0 ##": {"us_per_step": 999.0, "calls_per_step": 1},
                   "fxslots_forward": {"us_per_step": 500.0, "calls_per_step": 1}}
        return {"case": name, "kernels": kernels, "ops": {}, "matmuls": {},
                "phases": {"forward": dict(kernels), "backward": {}},
                "idle": {"wall_us": 1, "busy_us": 1, "idle_us": 0, "gaps": [],
                         "gaps_over_20us": 0, "idle_in_gaps_over_20us": 0}}

    results = {"inductor": case("inductor", 100.0), "fxslots": case("fxslots", 90.0)}
    profile_kernels.report(results, "inductor")
    out = capsys.readouterr().out
    assert "CompiledFxGraph" not in out and "fxslots_forward" not in out
    assert results["fxslots"]["families"] == {"gemm": {"us_per_step": 90.0,
                                                       "calls_per_step": 1.0}}
    forward = out[out.index("== forward families"):]
    assert forward.splitlines()[2].split() == ["total", "100", "90"]
