"""Render benchmark results (JSON) as a PNG: ``python benchmarks/chart.py results.json out.png``.

The JSON is a list of rows (or an object whose "rows" holds them, with optional "device",
"torch" and "title" fields for the title), each like::

    {"model": "launch-bound", "schedule": "1f1b", "case": "fxslots",
     "ms_per_step": 1.23, "peak_alloc_gib": 0.21, "error": null}

The picture has one row of panels per model: step time on the left, peak memory on the right;
schedules along x, one bar per case (eager, default compile, reduce-overhead, fxslots, then any
other case in the order the rows name it). A case that failed is a red cross at the bottom of
its place with the word "failed"; its error is listed under the chart. A case whose gradients
were wrong (``max_grad_err`` past bf16 rounding) is hatched and says so. Rows marked ``skipped``
(cases benchmarks/bench.py did not run) are left out. Needs matplotlib only.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_report import WRONG_GRADS  # noqa: E402  (one bar for the table and the chart)

CASE_ORDER = ("eager", "default", "compile", "default compile", "inductor", "reduce-overhead",
              "fxslots")
"""Known cases first, in this order; the spellings of a default torch.compile ("inductor" in
benchmarks/bench.py) sort together."""

CASE_COLORS = {"eager": "#7f7f7f", "default": "#1f77b4", "compile": "#1f77b4",
               "default compile": "#1f77b4", "inductor": "#1f77b4",
               "reduce-overhead": "#ff7f0e", "fxslots": "#2ca02c"}
OTHER_COLORS = ("#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
METRICS = (("ms_per_step", "step time (ms)"), ("peak_alloc_gib", "peak memory (GiB)"))

WIDTH_IN = 12.0
ROW_IN = 3.2
HEADER_IN = 0.7
NOTE_IN = 0.17
MAX_NOTES = 20


def load_rows(path: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows and the metadata of a results file."""
    with open(path) as f:
        data = json.load(f)
    meta: dict[str, Any] = {}
    if isinstance(data, dict):
        meta = {k: v for k, v in data.items() if k != "rows"}
        data = data.get("rows")
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise ValueError(f"{path}: expected a list of result rows (or {{'rows': [...]}})")
    for i, r in enumerate(data):
        missing = [k for k in ("model", "schedule", "case") if k not in r]
        if missing:
            raise ValueError(f"{path}: row {i} has no {', '.join(missing)}: {r}")
    return data, meta


def ordered(values: list[str], order: tuple[str, ...] = ()) -> list[str]:
    """Unique values: those in ``order`` first (in that order), then the rest as they appear."""
    seen = list(dict.fromkeys(values))
    return [v for v in order if v in seen] + [v for v in seen if v not in order]


def failed(row: dict[str, Any], metric: str) -> bool:
    return bool(row.get("error")) or row.get(metric) is None


def _heights(rows: list[dict[str, Any]]) -> list[float]:
    """Panel row heights in inches: one per model, then one for the list of failures."""
    models = ordered([str(r["model"]) for r in rows])
    notes = min(len([r for r in rows if r.get("error")]), MAX_NOTES + 1) + any(map(_wrong, rows))
    return [ROW_IN] * max(1, len(models)) + ([NOTE_IN * (notes + 1)] if notes else [])


def figure_size(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """(width, height) in inches; the PNG is that times the dpi in pixels."""
    return WIDTH_IN, HEADER_IN + sum(_heights(rows))


def render(json_path: str, png_path: str, *, dpi: int = 100) -> str:
    """Draw the results in ``json_path`` as a PNG at ``png_path``; returns ``png_path``."""
    rows, meta = load_rows(json_path)
    build_figure(rows, meta, dpi=dpi).savefig(png_path, dpi=dpi, format="png")
    return str(png_path)


def build_figure(rows: list[dict[str, Any]], meta: dict[str, Any] | None = None, *,
                 dpi: int = 100) -> Any:
    """The matplotlib Figure of result rows (see the module's docstring)."""
    meta = meta or {}
    rows = [r for r in rows if not r.get("skipped")]  # bench.py's cases that were not run
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError("benchmarks/chart.py needs matplotlib: pip install 'fxslots[plot]'"
                          ) from e
    models = ordered([str(r["model"]) for r in rows])
    cases = ordered([str(r["case"]) for r in rows], CASE_ORDER)
    colors = dict(CASE_COLORS)
    for i, c in enumerate(c for c in cases if c not in colors):
        colors[c] = OTHER_COLORS[i % len(OTHER_COLORS)]
    width, height = figure_size(rows)
    fig = Figure(figsize=(width, height), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    errors = [r for r in rows if r.get("error")]
    wrong = any(map(_wrong, rows))
    heights = _heights(rows)
    gs = fig.add_gridspec(len(heights), 2, height_ratios=heights)
    grid = [[fig.add_subplot(gs[m, 0]), fig.add_subplot(gs[m, 1])]
            for m in range(max(1, len(models)))]
    if not rows:
        grid[0][0].text(0.5, 0.5, "no results", ha="center", va="center")
    for m, model in enumerate(models):
        mine = [r for r in rows if str(r["model"]) == model]
        schedules = ordered([str(r["schedule"]) for r in mine])
        for col, (metric, label) in enumerate(METRICS):
            _panel(grid[m][col], mine, schedules, cases, colors, metric, label,
                   f"{model}: {label}")
    if errors or wrong:
        notes = fig.add_subplot(gs[-1, :])
        notes.axis("off")
        lines = [f"failed: {r['model']} / {r['schedule']} / {r['case']}: "
                 f"{_first_line(r['error'])}" for r in errors[:MAX_NOTES]]
        if len(errors) > MAX_NOTES:
            lines.append(f"... and {len(errors) - MAX_NOTES} more failures")
        if wrong:
            lines.append("hatched, 'wrong grads': after the timed steps, gradients accumulated "
                         "over two more steps differ from eager's (max_grad_err in the JSON)")
        notes.text(0.0, 1.0, "\n".join(lines), va="top", ha="left", fontsize=7,
                   transform=notes.transAxes, color="#b00000", family="monospace",
                   in_layout=False, clip_on=True)
    title = meta.get("title") or "fxslots benchmarks"
    for key in ("device", "torch", "dtype"):  # a value every row shares belongs in the title
        values = {str(r[key]) for r in rows if r.get(key)}
        if key not in meta and len(values) == 1 and all(r.get(key) for r in rows):
            meta = {**meta, key: values.pop()}
    extra = ", ".join(f"{k} {meta[k]}" for k in ("device", "torch", "dtype") if meta.get(k))
    fig.legend(handles=[_patch(colors[c], c) for c in cases], loc="outside upper center",
               ncols=max(1, len(cases)), fontsize=8, frameon=False,
               title=title + (f" ({extra})" if extra else ""), title_fontsize=11)
    return fig


def _patch(color: str, label: str) -> Any:
    from matplotlib.patches import Patch

    return Patch(facecolor=color, label=label)


def _wrong(row: dict[str, Any]) -> bool:
    return float(row.get("max_grad_err") or 0.0) > WRONG_GRADS


def _first_line(text: Any) -> str:
    line = str(text).strip().splitlines()[0] if str(text).strip() else "error"
    return textwrap.shorten(line, 110, placeholder=" ...")


def _panel(ax: Any, rows: list[dict[str, Any]], schedules: list[str], cases: list[str],
           colors: dict[str, str], metric: str, label: str, title: str) -> None:
    present = [c for c in cases if any(str(r["case"]) == c for r in rows)]
    width = 0.8 / max(1, len(present))
    top = max([float(r[metric]) for r in rows if not failed(r, metric)] + [0.0]) or 1.0
    for s, schedule in enumerate(schedules):
        for c, case in enumerate(present):
            x = s - 0.4 + width * (c + 0.5)
            row = next((r for r in rows if str(r["schedule"]) == schedule
                        and str(r["case"]) == case), None)
            if row is None:
                continue  # this case was not run for this schedule: leave its place empty
            if failed(row, metric):
                ax.plot([x], [top * 0.03], marker="x", color="#d00000", markersize=9,
                        markeredgewidth=2.2)
                ax.text(x, top * 0.09, "failed" if row.get("error") else "n/a", rotation=90,
                        ha="center", va="bottom", fontsize=7, color="#d00000")
                continue
            v = float(row[metric])
            # A case that ran but returned wrong gradients is hatched and says so: its speed
            # is not a result.
            wrong = _wrong(row)
            ax.bar(x, v, width=width * 0.92, color=colors[case], edgecolor="black",
                   linewidth=0.5, hatch="xxx" if wrong else None)
            ax.text(x, v, f"{v:.3g}" + ("\nwrong\ngrads" if wrong else ""), ha="center",
                    va="bottom", fontsize=6.5, color="#d00000" if wrong else "black")
    ax.set_xticks(range(len(schedules)), schedules, fontsize=8)
    ax.set_xlim(-0.5, len(schedules) - 0.5)
    ax.set_ylim(0, top * 1.15)
    ax.set_ylabel(label, fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    ax.set_title(title, fontsize=9, loc="left")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python benchmarks/chart.py RESULTS.json OUT.png", file=sys.stderr)
        return 2
    try:
        render(argv[0], argv[1])
    except (OSError, ValueError, ImportError) as e:
        print(f"benchmarks/chart.py: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {argv[1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
