"""The picture of a plan (fxslots.plot), the JSON plan, and the benchmark chart.

Everything here runs on CPU: each test explains one small model and draws it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import sympy
import torch

import fxslots
from examples import models
from fxslots import _torch, plot
from fxslots.record import CompiledGraphs
from fxslots.report import Report
from fxslots.schemas import Write, evaluate

PIL = pytest.importorskip("PIL.Image", reason="matplotlib (fxslots[plot]) brings Pillow")
pytest.importorskip("matplotlib", reason="the picture needs the fxslots[plot] extra")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))



from examples.models import SplitViews  # noqa: E402


# The golden-test models (examples.models factories, and views of one storage), with inputs.
GOLDEN = {
    "mlp": (models.mlp, lambda: torch.randn(4, 16), {}),
    "attention": (models.attention, lambda: torch.randn(2, 8, 16), {}),
    "gpt": (models.gpt, lambda: torch.randint(0, 64, (2, 8)), {}),
    "attention-dynamic": (models.attention, lambda: torch.randn(2, 8, 16), {"dynamic": True}),
    "views": (SplitViews, lambda: torch.randn(4, 8), {"partitioner": "default"}),
    "views-copied": (SplitViews, lambda: torch.randn(4, 8),
                     {"partitioner": "default", "copy_free": False}),
    "mlp-offloaded": (models.mlp, lambda: torch.randn(4, 16), {"offload": "all"}),
}


def explain(name: str) -> Report:
    factory, make_input, kw = GOLDEN[name]
    torch.manual_seed(0)
    kw = dict(kw)
    dynamic = kw.pop("dynamic", None)
    return fxslots.explain(factory(), make_input(), dynamic=dynamic, slots=2, **kw)


def png_size(path) -> tuple[int, int]:
    """(width, height) of a PNG that decodes fully; fails on anything else."""
    with PIL.open(path) as img:
        assert img.format == "PNG"
        img.load()  # decodes every pixel: a truncated file raises here
        return img.size


def expected_px(size_in: tuple[float, float], dpi: int) -> tuple[int, int]:
    """A figure of ``size_in`` inches saved at ``dpi``: Agg truncates to whole pixels."""
    return int(size_in[0] * dpi), int(size_in[1] * dpi)


# ---------------------------------------------------------------------------------------------
# The picture


@pytest.mark.parametrize("name", list(GOLDEN))
def test_picture_of_golden_model_is_a_png_of_the_expected_size(name, tmp_path):
    report = explain(name)
    path = tmp_path / f"{name}.png"
    assert report.plot(str(path)) == str(path)
    assert png_size(path) == expected_px(plot.figure_size(report), 100)
    with PIL.open(path) as img:  # something was drawn: boxes in several colours, text
        colors = img.convert("RGB").getcolors(maxcolors=1 << 20)
    assert len(colors) > 50, "the picture is (nearly) blank"


def test_picture_dpi_sets_the_pixel_size(tmp_path):
    report = explain("mlp")
    path = tmp_path / "mlp.png"
    plot.plot_report(report, str(path), dpi=50)
    assert png_size(path) == expected_px(plot.figure_size(report), 50)


def test_figure_has_a_plan_panel_per_graph_and_a_slot_panel():
    report = explain("mlp")
    fig = plot.build_figure(report)
    plan_ax, slot_ax = fig.axes
    assert plan_ax.get_title(loc="left").startswith("graph 0 (v0 of region 0): 2 storage groups")
    assert "arena per slot 1.0 KiB (1024 B)" in plan_ax.get_title(loc="left")
    # one box per slotted group, plus the legend's patches (not in ax.patches)
    boxes = [p for p in plan_ax.patches]
    assert len(boxes) == 2
    legend = [t.get_text() for t in plan_ax.get_legend().get_texts()]
    assert legend == ["copy-free", "copied", "offloaded", "arena capacity"]
    assert slot_ax.get_title(loc="left") == "slots after the explained step"
    labels = [t.get_text() for t in slot_ax.texts]
    assert labels == ["v0, microbatch 0, released; arena 1.0 KiB", "never used; arena 0 B"]


def test_symbolic_plan_shows_its_capacity_formula_and_is_drawn_at_the_step_shapes():
    report = explain("attention-dynamic")
    (g,) = report.graphs
    cap = sympy.sympify(g.plan.capacity)
    assert cap.free_symbols, "dynamic=True should give a symbolic plan"
    t = plot.timeline(g)
    # The step ran x of shape (2, 8, 16): the symbols are the batch and the sequence length.
    assert sorted(t.env.values()) == [2, 8]
    assert set(t.env_source.values()) == {"the explained step"}
    # Drawn at the step's shapes, the capacity is the arena the step really allocated.
    assert t.capacity == report.slots[0]["bytes"]
    title = plot.build_figure(report).axes[0].get_title(loc="left")
    assert f"arena per slot = {cap} B" in title
    assert "(the explained step)" in title


def test_symbol_values_fall_back_to_upper_bound_then_an_assumed_value():
    g = explain("attention-dynamic").graphs[0]
    syms = sorted(g.saved.symbol_ranges, key=str)
    unbound = SimpleNamespace(saved=g.saved, plan=g.plan, variant=None)
    env, source = plot.symbol_env(unbound)
    for s in syms:
        lo, hi = g.saved.symbol_ranges[s]
        assert hi is None  # dynamic=True leaves them unbounded
        assert env[s] == max(lo, plot.DEFAULT_SYMBOL_VALUE) and source[str(s)] == "assumed"
    bounded = SimpleNamespace(
        saved=dataclasses.replace(g.saved, symbol_ranges={s: (2, 100) for s in syms}),
        plan=g.plan, variant=None)
    env, source = plot.symbol_env(bounded)
    assert all(env[s] == 100 and source[str(s)] == "upper bound" for s in syms)


def test_mlp_timeline_boxes_run_from_producer_to_last_backward_reader():
    (g,) = explain("mlp").graphs
    t = plot.timeline(g)
    fw, bw = list(t.forward), list(t.backward)
    assert fw[-1] == bw[-1] == "return"
    nf = len(fw)
    by_member = {b.members: b for b in t.boxes}
    addmm, gelu = by_member[("addmm",)], by_member[("gelu",)]
    assert (addmm.start, addmm.end) == (fw.index("addmm"), nf + bw.index("gelu_backward"))
    assert (gelu.start, gelu.end) == (fw.index("gelu"), nf + bw.index("mm_1"))
    assert (addmm.offset, addmm.nbytes, gelu.offset, gelu.nbytes) == (0, 512, 512, 512)
    assert addmm.kind == gelu.kind == "copy-free" and addmm.read and gelu.read
    assert t.capacity == 1024 and t.env == {}


@pytest.mark.parametrize("name", ["mlp", "attention", "gpt", "views", "views-copied"])
def test_timeline_from_recorded_lines_matches_the_graph_modules(name):
    """The picture reads node order and liveness from the lines the compile recorded; check
    both against the GraphModules themselves, with storage identity for 'reads the saved
    bytes'."""
    report = explain(name)
    for g in report.graphs:
        fw_gm, bw_gm = g.variant.forward_graph, g.variant.backward_graph
        assert isinstance(fw_gm, torch.fx.GraphModule) and isinstance(bw_gm, torch.fx.GraphModule)
        t = plot.timeline(g)
        order = [("return" if n.op == "output" else n.name) for n in fw_gm.graph.nodes
                 if n.op != "placeholder"]
        assert list(t.forward) == order
        bw_nodes = [n for n in bw_gm.graph.nodes if n.op != "placeholder"]
        assert list(t.backward) == ["return" if n.op == "output" else n.name for n in bw_nodes]
        placeholders = {n.name: n for n in bw_gm.graph.find_nodes(op="placeholder")}
        fw_index = {n: i for i, n in enumerate(order)}
        slotted = [p for p in g.plan.placements if p.write is not Write.NONE]
        assert [b.group for b in t.boxes] == [p.group for p in slotted]
        for b in t.boxes:
            group = g.saved.groups[b.group]
            keys = {_torch.storage_key(placeholders[m].meta["val"]) for m in group.members}
            last = None
            for j, n in enumerate(bw_nodes):
                if any(_storage_keys(a) & keys for a in n.all_input_nodes):
                    last = len(order) + j
            assert b.end == (last if last is not None else len(order)), (name, b)
            names = list(group.members) + ([group.root.name] if group.root else [])
            assert b.start == min(fw_index[n] for n in names if n in fw_index), (name, b)


def _storage_keys(node) -> set:
    v = node.meta.get("val")
    vals = v if isinstance(v, (list, tuple)) else [v]
    return {_torch.storage_key(x) for x in vals if isinstance(x, torch.Tensor)}


@pytest.mark.parametrize("name,kind", [("views", "copy-free"), ("views-copied", "copied")])
def test_views_of_one_storage_are_one_box_from_their_base(name, kind):
    (g,) = explain(name).graphs
    t = plot.timeline(g)
    (box,) = t.boxes
    assert set(box.members) == {"getitem", "getitem_1", "expand", "t"} and box.kind == kind
    # The box starts where the base (mm) is produced, not where the views are made, and ends
    # at the last backward node that reads any of the views or a view of them.
    assert box.start == t.forward.index("mm")
    readers = [j for j, ln in enumerate(g.backward_lines)
               if set(ln.reads) & {*box.members, "t_1", "t_2"}]
    assert box.end == len(t.forward) + max(readers)
    assert (box.offset, box.nbytes, t.capacity) == (0, 256, 512)


def test_recorded_lines_read_names_targets_arguments_and_views():
    (g,) = explain("views").graphs
    fw_gm = g.variant.forward_graph
    nodes = [n for n in fw_gm.graph.nodes if n.op != "placeholder"]
    assert [(ln.name, ln.reads) for ln in g.forward_lines] == [
        ("return" if n.op == "output" else n.name, tuple(a.name for a in n.all_input_nodes))
        for n in nodes]
    targets = {ln.name: ln for ln in g.forward_lines}
    assert targets["mm"].target == "mm.out" and not targets["mm"].aliases
    assert targets["t"].aliases and targets["getitem"].aliases


def test_view_ops_are_recognised_from_their_schema():
    aten = torch.ops.aten
    for target in [aten.view.default, aten.transpose.int, aten.detach.default,
                   aten.expand.default, aten.t.default, aten._unsafe_view.default,
                   aten.split.Tensor, __import__("operator").getitem]:
        assert _torch.returns_view(target), target
    for target in [aten.mm.default, aten.clone.default, aten.addmm.out,
                   aten.gelu_backward.default, aten.mul.Tensor, "output"]:
        assert not _torch.returns_view(target), target


def test_offloaded_placements_get_their_own_colour():
    assert plot.kind_of(SimpleNamespace(write=Write.OFFLOAD)) == "offloaded"
    assert plot.kind_of(SimpleNamespace(write=Write.OUT)) == "copy-free"
    assert plot.kind_of(SimpleNamespace(write=Write.COPY)) == "copied"
    assert set(plot.COLORS) == set(plot.KINDS)


def test_report_without_slots_still_draws(tmp_path):
    fallback = CompiledGraphs(None, None, None, "def forward(\n):", "def forward(\n):",
                              fallback="saved tensor x overlaps itself")
    for report in (Report([], []), Report([fallback], [])):
        path = tmp_path / "empty.png"
        plot.plot_report(report, str(path))
        assert png_size(path) == expected_px(plot.figure_size(report), 100)
    texts = [t.get_text() for ax in plot.build_figure(Report([fallback], [])).axes
             for t in ax.texts]
    assert "graph 0: runs without slots: saved tensor x overlaps itself" in texts


def test_missing_matplotlib_names_the_extra(monkeypatch, tmp_path):
    for mod in ["matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"]:
        monkeypatch.setitem(sys.modules, mod, None)  # import now raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'fxslots\[plot\]'"):
        Report([], []).plot(str(tmp_path / "x.png"))
    assert not (tmp_path / "x.png").exists()


# ---------------------------------------------------------------------------------------------
# The JSON plan


def _sym(text: str, symbols: dict[str, sympy.Symbol]) -> sympy.Expr:
    return sympy.sympify(text, locals=symbols)


def _view_matches(j: dict, v, symbols: dict) -> bool:
    return (j["name"] == v.name and j["holds"] == v.holds and getattr(torch, j["dtype"]) == v.dtype
            and j["arena"] == ("host" if v.host else "device")
            and [_sym(x, symbols) for x in j["shape"]] == list(v.shape)
            and [_sym(x, symbols) for x in j["stride"]] == list(v.stride)
            and sympy.simplify(_sym(j["byte_offset"], symbols)
                               - v.storage_offset * v.dtype.itemsize) == 0)


@pytest.mark.parametrize("name", ["mlp", "views-copied", "attention-dynamic", "mlp-offloaded"])
def test_json_plan_round_trips(name):
    """Everything the plan places, where (found by a review: the host arena, the offloaded and
    staged bytes and each view's place were missing, so a member could not be found)."""
    report = explain(name)
    text = report.to_json()
    data = json.loads(text)
    assert json.loads(json.dumps(data)) == data
    assert data["slots"] == report.slots
    assert len(data["graphs"]) == len(report.plans)
    for j, (saved, plan) in zip(data["graphs"], report.plans):
        symbols = {str(s): s for s in saved.symbol_ranges}
        assert _sym(j["capacity"], symbols) == plan.capacity
        assert _sym(j["copied_bytes"], symbols) == plan.copied_bytes
        assert (j["alignment"], j["capacity_bound"]) == (plan.alignment, plan.capacity_bound)
        for key in ("host_capacity", "offloaded_bytes", "staged_bytes"):
            assert sympy.simplify(_sym(j[key], symbols) - getattr(plan, key)) == 0, key
        assert len(j["staging"]) == len(plan.staging)
        assert all(_view_matches(a, b, symbols) for a, b in zip(j["staging"], plan.staging))
        assert [g["group"] for g in j["groups"]] == [p.group for p in plan.placements]
        for jg, p in zip(j["groups"], plan.placements):
            group = saved.groups[p.group]
            assert jg["write"] == p.write.value and Write(jg["write"]) is p.write
            assert jg["source"] == group.source.value
            assert sympy.simplify(_sym(jg["offset"], symbols) - p.offset) == 0
            assert sympy.simplify(_sym(jg["nbytes"], symbols) - p.nbytes) == 0
            assert tuple(jg["copies"]) == p.copies and jg["reason"] == p.reason
            assert jg["arena"] == ("host" if p.write is Write.OFFLOAD else "device")
            assert len(jg["views"]) == len(p.views)
            assert all(_view_matches(a, b, symbols) for a, b in zip(jg["views"], p.views))
            assert [m["name"] for m in jg["members"]] == list(group.members)
            for m in jg["members"]:
                t = saved.tensor(m["name"])
                assert getattr(torch, m["dtype"]) == t.dtype
                assert [_sym(x, symbols) for x in m["shape"]] == list(t.shape)
                assert [_sym(x, symbols) for x in m["stride"]] == list(t.stride)
                assert _sym(m["storage_offset"], symbols) == t.storage_offset
                assert sympy.simplify(_sym(m["nbytes"], symbols) - t.nbytes) == 0
        if symbols:  # a symbolic plan's strings evaluate like the plan at a concrete shape
            env = {s: 8 for s in symbols.values()}
            assert evaluate(_sym(j["capacity"], symbols), env) == evaluate(plan.capacity, env)
    if name == "mlp-offloaded":
        assert [g["arena"] for g in data["graphs"][0]["groups"]].count("host") >= 1
        (_, plan), = report.plans
        assert data["slots"][0]["host_bytes"] == int(plan.host_capacity) > 0


# ---------------------------------------------------------------------------------------------
# The benchmark chart


def _chart():
    spec = importlib.util.spec_from_file_location("bench_chart",
                                                  os.path.join(ROOT, "benchmarks", "chart.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ROWS = [
    {"model": "launch-bound", "schedule": "sequential", "case": "fxslots",
     "ms_per_step": 1.3, "peak_alloc_gib": 0.22, "error": None},
    {"model": "launch-bound", "schedule": "sequential", "case": "eager",
     "ms_per_step": 3.96, "peak_alloc_gib": 0.34, "error": None},
    {"model": "launch-bound", "schedule": "sequential", "case": "reduce-overhead",
     "ms_per_step": 1.42, "peak_alloc_gib": 0.23, "error": None},
    {"model": "launch-bound", "schedule": "sequential", "case": "default",
     "ms_per_step": 3.1, "peak_alloc_gib": 0.30, "error": None},
    {"model": "launch-bound", "schedule": "1f1b", "case": "eager",
     "ms_per_step": 14.2, "peak_alloc_gib": 0.5, "error": None},
    {"model": "launch-bound", "schedule": "1f1b", "case": "reduce-overhead",
     "ms_per_step": None, "peak_alloc_gib": None,
     "error": "RuntimeError: accessing tensor output of CUDAGraphs that has been overwritten"},
    {"model": "launch-bound", "schedule": "1f1b", "case": "fxslots",
     "ms_per_step": 11.9, "peak_alloc_gib": 0.47, "error": None},
    {"model": "heavy", "schedule": "sequential", "case": "eager",
     "ms_per_step": 6.89, "peak_alloc_gib": 1.94, "error": None, "extra": "ignored"},
    {"model": "heavy", "schedule": "sequential", "case": "fxslots",
     "ms_per_step": 6.5, "peak_alloc_gib": None, "error": None},
]


def test_chart_renders_hand_made_results(tmp_path):
    chart = _chart()
    src = tmp_path / "results.json"
    src.write_text(json.dumps({"device": "NVIDIA H200", "torch": "2.11", "rows": ROWS}))
    out = tmp_path / "chart.png"
    assert chart.render(str(src), str(out)) == str(out)
    assert png_size(out) == expected_px(chart.figure_size(ROWS), 100)
    # A plain list of rows is accepted too.
    src.write_text(json.dumps(ROWS))
    chart.render(str(src), str(out), dpi=40)
    assert png_size(out) == expected_px(chart.figure_size(ROWS), 40)


def test_chart_orders_cases_draws_values_and_marks_failures():
    chart = _chart()
    assert chart.ordered(["fxslots", "x", "eager", "reduce-overhead", "default"],
                         chart.CASE_ORDER) == ["eager", "default", "reduce-overhead", "fxslots",
                                               "x"]
    fig = chart.build_figure(ROWS, {"device": "H200"})
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == [
        "eager", "default", "reduce-overhead", "fxslots"]
    assert legend.get_title().get_text() == "fxslots benchmarks (device H200)"
    by_title = {ax.get_title(loc="left"): ax for ax in fig.axes if ax.get_title(loc="left")}
    assert set(by_title) == {"launch-bound: step time (ms)", "launch-bound: peak memory (GiB)",
                             "heavy: step time (ms)", "heavy: peak memory (GiB)"}

    def bars(ax):
        return sorted(round(p.get_height(), 6) for p in ax.patches)

    def marks(ax):
        return [t.get_text() for t in ax.texts if t.get_text() in ("failed", "n/a")]

    # A field that every row shares (bench.py writes "torch" in each) goes in the title.
    shared = [{**r, "torch": "2.11.0+cu128"} for r in ROWS]
    title = chart.build_figure(shared, {}).legends[0].get_title().get_text()
    assert title == "fxslots benchmarks (torch 2.11.0+cu128)"

    step = by_title["launch-bound: step time (ms)"]
    assert bars(step) == sorted([1.3, 3.96, 1.42, 3.1, 14.2, 11.9])
    assert marks(step) == ["failed"]
    assert bars(by_title["heavy: peak memory (GiB)"]) == [1.94]
    assert marks(by_title["heavy: peak memory (GiB)"]) == ["n/a"]
    notes = [t.get_text() for ax in fig.axes for t in ax.texts
             if t.get_text().startswith("failed:")]
    assert notes == ["failed: launch-bound / 1f1b / reduce-overhead: RuntimeError: accessing "
                     "tensor output of CUDAGraphs that has been overwritten"]


def test_chart_hatches_cases_with_wrong_gradients(tmp_path):
    chart = _chart()
    rows = [{**r, "max_grad_err": 6.6e27 if r["case"] == "reduce-overhead" else 0.0}
            for r in ROWS]
    fig = chart.build_figure(rows, {})
    step = next(ax for ax in fig.axes if ax.get_title(loc="left") == "launch-bound: step time (ms)")
    hatched = [round(p.get_height(), 6) for p in step.patches if p.get_hatch()]
    assert hatched == [1.42]  # reduce-overhead's sequential bar; its 1f1b case failed outright
    assert any("wrong" in t.get_text() for t in step.texts)
    notes = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any("gradients accumulated over two more steps differ" in n for n in notes)
    assert not any(p.get_hatch() for ax in chart.build_figure(ROWS, {}).axes for p in ax.patches)
    out = tmp_path / "chart.png"
    src = tmp_path / "rows.json"
    src.write_text(json.dumps(rows))
    chart.render(str(src), str(out))
    assert png_size(out) == expected_px(chart.figure_size(rows), 100)


def test_chart_command_line(tmp_path):
    src = tmp_path / "results.json"
    src.write_text(json.dumps(ROWS))
    out = tmp_path / "chart.png"
    script = os.path.join(ROOT, "benchmarks", "chart.py")
    r = subprocess.run([sys.executable, script, str(src), str(out)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert png_size(out)[0] == 1200
    src.write_text(json.dumps([{"model": "m", "case": "eager"}]))
    r = subprocess.run([sys.executable, script, str(src), str(out)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "row 0 has no schedule" in r.stderr
