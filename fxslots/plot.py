"""Pictures of arena plans: ``fxslots.explain(...).plot("plan.png")``.

Needs matplotlib, the optional extra ``fxslots[plot]``. The picture is the classic memory-planner
chart: x is the timeline (forward nodes, then backward nodes, in graph order), y is the byte offset
inside one slot's arena, and each storage group is a box from its producer in the forward to its
last reader in the backward. A last panel shows every slot of the ring after the explained step.

The boxes come from ``fxslots.timeline``, which lays the plan on the recorded graphs.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import sympy

from .schemas import ArenaPlan
from .timeline import DEFAULT_SYMBOL_VALUE, KINDS, Timeline, kind_of, symbol_env, timeline

__all__ = ["DEFAULT_SYMBOL_VALUE", "KINDS", "COLORS", "kind_of", "symbol_env", "timeline",
           "plot_report", "build_figure", "figure_size", "require_matplotlib"]

EXTRA_HINT = "pip install 'fxslots[plot]'"

COLORS = {"copy-free": "#3a923a", "copied": "#e1812c", "offloaded": "#3274a1"}

MAX_GRAPHS = 6
"""At most this many graphs get a panel; the figure says how many were left out."""

_WIDTH_IN = 12.0
_PLAN_IN = 4.2
_FALLBACK_IN = 1.1
_SLOTS_BASE_IN = 1.0
_SLOT_IN = 0.32


def require_matplotlib() -> Any:
    """The matplotlib module, or an ImportError that names the extra to install."""
    try:
        import matplotlib
        import matplotlib.backends.backend_agg  # noqa: F401
        import matplotlib.figure  # noqa: F401
    except ImportError as e:
        raise ImportError(
            f"fxslots: drawing plans needs matplotlib, which is not installed; "
            f"install the plot extra: {EXTRA_HINT}") from e
    return matplotlib


# ---------------------------------------------------------------------------------------------
# The figure


def _panel_heights(report: Any) -> list[float]:
    """Inches of each panel: the graphs' (a message when there is none), then the slots'."""
    graphs = [_PLAN_IN if g.plan is not None else _FALLBACK_IN for g in report.graphs[:MAX_GRAPHS]]
    return (graphs or [_FALLBACK_IN]) + [_SLOTS_BASE_IN + _SLOT_IN * max(1, len(report.slots))]


def figure_size(report: Any) -> tuple[float, float]:
    """The figure's (width, height) in inches; at ``dpi`` the PNG is that times ``dpi`` pixels."""
    return _WIDTH_IN, sum(_panel_heights(report))


def plot_report(report: Any, path: str, *, dpi: int = 100) -> str:
    """Draw ``report`` (from ``fxslots.explain``) as a PNG at ``path``; returns ``path``.

    The PNG is ``figure_size(report)`` inches times ``dpi`` pixels.
    """
    build_figure(report, dpi=dpi).savefig(path, dpi=dpi, format="png")
    return str(path)


def build_figure(report: Any, *, dpi: int = 100) -> Any:
    """The matplotlib Figure of ``report``: one panel per compiled graph (at most
    ``MAX_GRAPHS``) with its arena plan on the forward then backward timeline, then a panel of
    every slot of the ring and what holds it after the step."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    width, height = figure_size(report)
    fig = Figure(figsize=(width, height), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    graphs = list(report.graphs[:MAX_GRAPHS])
    heights = _panel_heights(report)
    axes = fig.subplots(len(heights), 1, gridspec_kw={"height_ratios": heights},
                        squeeze=False)[:, 0]
    if not graphs:
        _message(axes[0], "no graph was compiled with fxslots in the explained step")
    for i, (ax, g) in enumerate(zip(axes, graphs)):
        title = _graph_title(i, g)
        if g.plan is None:
            _message(ax, f"{title}: runs without slots: {g.fallback or g.inference or 'no plan'}")
        else:
            _draw_plan(ax, g, title)
    if len(report.graphs) > MAX_GRAPHS:
        fig.suptitle(f"first {MAX_GRAPHS} of {len(report.graphs)} compiled graphs", fontsize=9)
    _draw_slots(axes[-1], report.slots)
    return fig


def _graph_title(i: int, g: Any) -> str:
    if g.variant is None:
        return f"graph {i}"
    return f"graph {i} ({g.variant.name} of {g.variant.ring.name})"


def _message(ax: Any, text: str) -> None:
    ax.axis("off")
    ax.text(0.01, 0.5, text, transform=ax.transAxes, va="center", ha="left", fontsize=9,
            wrap=True)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _byte_axis(axis: Any, top: float) -> None:
    """Ticks at power-of-two multiples, labelled in B / KiB / MiB / GiB."""
    from matplotlib.ticker import FuncFormatter, MultipleLocator

    step = 2 ** max(0, math.ceil(math.log2(max(top, 1) / 8)))
    axis.set_major_locator(MultipleLocator(step))
    axis.set_major_formatter(FuncFormatter(lambda v, _: human_bytes(v)))


def _draw_plan(ax: Any, g: Any, title: str) -> None:
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    t = timeline(g)
    nf = len(t.forward)
    top = max([t.capacity] + [b.offset + b.nbytes for b in t.boxes] + [1])
    _draw_boxes(ax, t, top)
    cap_line = ax.axhline(t.capacity, color="crimson", linewidth=1.4, linestyle="--")
    ax.axvline(nf - 0.5, color="0.3", linewidth=0.8)
    for x, text in ((nf / 2, "forward"), (nf + len(t.backward) / 2, "backward")):
        ax.text(x, 1.0, text, transform=ax.get_xaxis_transform(), ha="center", va="bottom",
                fontsize=8, color="0.3")
    ax.set_xlim(-0.5, max(t.length, 1) - 0.5)
    ax.set_ylim(0, top * 1.08)
    ax.set_xlabel("node order (forward, then backward)", fontsize=8)
    ax.set_ylabel("byte offset in one slot's arena", fontsize=8)
    _byte_axis(ax.yaxis, top)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=20))
    ax.tick_params(labelsize=7)
    ax.legend(handles=[Patch(facecolor=COLORS[k], edgecolor="black", label=k) for k in KINDS]
              + [cap_line], labels=[*KINDS, "arena capacity"], loc="upper left",
              bbox_to_anchor=(1.005, 1.0), fontsize=7, frameon=False)
    copied = sympy.sympify(g.plan.copied_bytes)
    ax.set_title(f"{title}: {len(t.boxes)} storage groups in slots, {_capacity_text(g.plan, t)}; "
                 f"copied per forward {copied} B", fontsize=9, loc="left", wrap=True, pad=12)


def _draw_boxes(ax: Any, t: Timeline, top: int) -> None:
    from matplotlib.patches import Rectangle

    for b in t.boxes:
        ax.add_patch(Rectangle((b.start, b.offset), b.end + 1 - b.start, b.nbytes,
                               facecolor=COLORS[b.kind], edgecolor="black", linewidth=0.6,
                               alpha=0.85, hatch=None if b.read else "//"))
        if b.nbytes >= 0.045 * top and (b.end + 1 - b.start) >= 0.06 * max(t.length, 1):
            more = " …" if len(b.members) > 2 else ""
            label = f"g{b.group} " + ", ".join(b.members[:2]) + more
            ax.text(b.start + 0.5, b.offset + b.nbytes / 2, label, fontsize=7, va="center",
                    ha="left", clip_on=True)


def _capacity_text(plan: ArenaPlan, t: Timeline) -> str:
    cap = sympy.sympify(plan.capacity)
    if cap.is_Integer:
        return f"arena per slot {human_bytes(t.capacity)} ({t.capacity} B)"
    bound = (f", at most {human_bytes(plan.capacity_bound)}"
             if plan.capacity_bound is not None else ", unbounded")
    by_source: dict[str, list[str]] = {}
    for k, v in t.env.items():
        by_source.setdefault(t.env_source[k], []).append(f"{k}={v}")
    at = "; ".join(f"{', '.join(vs)} ({src})" for src, vs in by_source.items())
    return f"arena per slot = {cap} B{bound}; drawn at {at} ({human_bytes(t.capacity)})"


def _draw_slots(ax: Any, slots: Sequence[Mapping[str, Any]]) -> None:
    ax.set_title("slots after the explained step", fontsize=9, loc="left")
    if not slots:
        _message(ax, "no slot ring: nothing was placed in slots")
        return
    variants = sorted({str(s["variant"]) for s in slots if s["variant"] is not None})
    palette = ["#6a4c93", "#1982c4", "#8ac926", "#ff924c", "#c5ca30", "#ff595e"]
    color = {v: palette[i % len(palette)] for i, v in enumerate(variants)}
    widest = max(max(int(s["bytes"]) for s in slots), 1)
    labels = []
    for y, s in enumerate(slots):
        nbytes = int(s["bytes"])
        held = s["variant"] is not None
        ax.barh(y, max(nbytes, 0), height=0.6, color=color.get(str(s["variant"]), "0.8"),
                edgecolor="black", linewidth=0.6, hatch="xx" if s.get("pending") else None)
        if held:
            state = "pending its backward" if s.get("pending") else "released"
            what = f"{s['variant']}, microbatch {s['microbatch']}, {state}"
        else:
            what = "never used"
        ax.text(widest * 0.01, y, f"{what}; arena {human_bytes(nbytes)}", va="center",
                fontsize=7)
        labels.append(f"{s['ring']} slot {s['slot']}")
    ax.set_yticks(range(len(slots)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, widest * 1.05)
    ax.set_xlabel("arena bytes", fontsize=8)
    _byte_axis(ax.xaxis, widest)
    ax.tick_params(axis="x", labelsize=7)
