"""Pictures of arena plans: ``fxslots.explain(...).plot("plan.png")``.

Needs matplotlib, the optional extra ``fxslots[plot]``. The picture is the classic memory-planner
chart: x is the timeline (forward nodes, then backward nodes, in graph order), y is the byte offset
inside one slot's arena, and each storage group is a box from its producer in the forward to its
last reader in the backward. A last panel shows every slot of the ring after the explained step.

The timeline is read from the printed graphs the report keeps (``forward_after`` and
``backward``), so it shows exactly what ``str(report)`` shows.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import sympy

from .schemas import ArenaPlan, Placement, SavedSet, Write, evaluate

EXTRA_HINT = "pip install 'fxslots[plot]'"

KINDS = ("copy-free", "copied", "offloaded")
"""How a group's bytes reach its slot; every kind has a colour in the legend."""

COLORS = {"copy-free": "#3a923a", "copied": "#e1812c", "offloaded": "#3274a1"}

MAX_GRAPHS = 6
"""At most this many graphs get a panel; the figure says how many were left out."""

DEFAULT_SYMBOL_VALUE = 64
"""What an unbounded shape symbol is drawn at when the explained step did not bind it."""

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
# The timeline, read from the printed graphs


@dataclass(frozen=True)
class GraphLine:
    """One printed non-placeholder node: ``name: type = target(args)`` (or the ``return``)."""

    name: str  # "return" for the output line
    target: str
    reads: tuple[str, ...]  # names of the nodes among its arguments, in order


_NODE_RE = re.compile(
    r"^    (?P<name>[A-Za-z_]\w*)(?:: .*?)? = (?P<target>[\w.:]+)\((?P<args>.*)\)$")
_PLACEHOLDER_RE = re.compile(r"^    (?P<name>[A-Za-z_]\w*): .*?,(?:  # .*)?$")
_IDENT_RE = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?![\w=])")


def parse_graph(text: str) -> tuple[list[str], list[GraphLine]]:
    """The placeholders and the node lines of a graph printed by ``printing.format_graph``."""
    placeholders: list[str] = []
    lines: list[GraphLine] = []
    known: set[str] = set()
    body = False
    for raw in text.splitlines():
        if not body:
            if raw.startswith("):"):
                body = True
            elif (m := _PLACEHOLDER_RE.match(raw)) is not None:
                placeholders.append(m["name"])
                known.add(m["name"])
            continue
        line = _strip_note(raw)
        if line.startswith("    return "):
            lines.append(GraphLine("return", "output", _reads(line[len("    return "):], known)))
            continue
        m = _NODE_RE.match(line)
        if m is None:
            if line.strip():
                raise ValueError(f"fxslots.plot: cannot read this graph line: {raw!r}")
            continue
        lines.append(GraphLine(m["name"], m["target"], _reads(m["args"], known)))
        known.add(m["name"])
    return placeholders, lines


def _strip_note(line: str) -> str:
    """Drop a trailing ``  # note`` that the rewrite left on a node."""
    head, sep, _ = line.rpartition("  # ")
    return head if sep and head.endswith(")") else line


def _reads(args: str, known: set[str]) -> tuple[str, ...]:
    seen: list[str] = []
    for m in _IDENT_RE.finditer(args):
        if m[0] in known and m[0] not in seen:
            seen.append(m[0])
    return tuple(seen)


_ALIASING_NAMES = {"getitem", "_unsafe_view", "reshape", "alias", "view_as", "expand_as"}


@functools.lru_cache(maxsize=None)
def aliases_input(target: str) -> bool:
    """True when the printed ``target`` returns a view of an input (so reading its result
    reads that input's bytes): ATen ops whose schema says so, and getitem of such a result."""
    parts = target.split(".")  # "getitem", "aten.view", "aten.transpose.int"
    if parts[min(1, len(parts) - 1)] in _ALIASING_NAMES:
        return True
    if len(parts) < 2:
        return False
    import torch

    try:
        packet = getattr(getattr(torch.ops, parts[0]), parts[1])
        op = getattr(packet, parts[2] if len(parts) > 2 else "default")
        schema = op._schema
        # Views return an alias of an input; mutating ops (out=, in place) return the tensor
        # they wrote, which in a backward graph is never a saved tensor.
        return not schema.is_mutable and any(r.alias_info is not None for r in schema.returns)
    except (AttributeError, RuntimeError):
        return False


@dataclass(frozen=True)
class Box:
    """One storage group drawn on the timeline: [start, end] by [offset, offset + nbytes)."""

    group: int
    members: tuple[str, ...]
    kind: str  # one of KINDS
    start: int  # timeline index of the producer in the forward
    end: int  # timeline index of the last backward node that reads its bytes (inclusive)
    offset: int
    nbytes: int
    read: bool  # False when no backward node reads it (the box then ends where backward starts)


@dataclass(frozen=True)
class Timeline:
    """A plan laid on its graphs' node order, with every size evaluated at ``env``."""

    forward: tuple[str, ...]  # forward node names, in order (the output node is "return")
    backward: tuple[str, ...]
    boxes: tuple[Box, ...]
    capacity: int
    env: Mapping[str, int]  # the value each shape symbol is drawn at (empty when static)
    env_source: Mapping[str, str]  # where each value came from (see ``symbol_env``)

    @property
    def length(self) -> int:
        return len(self.forward) + len(self.backward)


def kind_of(p: Placement) -> str:
    """The colour class of a placement: copy-free, copied or offloaded."""
    if getattr(p, "offload", None) or getattr(p, "offloaded", False) or "offload" in p.write.value:
        return "offloaded"
    return "copy-free" if p.write is Write.OUT else "copied"


def symbol_env(graph: Any) -> tuple[dict[sympy.Symbol, int], dict[str, str]]:
    """Values to draw a symbolic plan at, and where each came from: the shapes the explained step
    ran (when it ran this variant at one shape), else the symbol's upper bound, else its lower
    bound raised to ``DEFAULT_SYMBOL_VALUE`` ("assumed")."""
    saved: SavedSet = graph.saved
    plan: ArenaPlan = graph.plan
    exprs = [plan.capacity] + [e for p in plan.placements for e in (p.offset, p.nbytes)]
    free = set().union(*(sympy.sympify(e).free_symbols for e in exprs))
    by_name = {str(s): s for s in free}
    env: dict[sympy.Symbol, int] = {}
    source: dict[str, str] = {}
    layouts = getattr(graph.variant, "layouts", None) or {}
    if free and len(layouts) == 1:  # one shape ran: its runtime.ViewLayout has the values
        (layout,) = layouts.values()
        for name, value in getattr(layout, "key", ()):
            if name in by_name:
                env[by_name[name]] = int(value)
                source[name] = "the explained step"
    for s in sorted(free - env.keys(), key=str):
        lo, hi = saved.symbol_ranges.get(s, (0, None))
        env[s] = hi if hi is not None else max(lo, DEFAULT_SYMBOL_VALUE)
        source[str(s)] = "upper bound" if hi is not None else "assumed"
    return env, source


def timeline(graph: Any) -> Timeline:
    """Lay the plan of one compiled graph (``report.graphs[i]``, with a plan) on its timeline."""
    saved: SavedSet = graph.saved
    plan: ArenaPlan = graph.plan
    if plan is None:
        raise ValueError("fxslots.plot: this graph has no plan (it runs without slots)")
    _, fw = parse_graph(graph.forward_after)
    _, bw = parse_graph(graph.backward) if graph.backward else ([], [])
    fw_pos = {}
    for i, line in enumerate(fw):
        fw_pos.setdefault(line.name, i)
    last_read: dict[int, int] = {}
    alias: dict[str, set[int]] = {m: {g.id} for g in saved.groups for m in g.members}
    for j, line in enumerate(bw):
        groups = set().union(*(alias.get(r, set()) for r in line.reads))
        for gid in groups:
            last_read[gid] = len(fw) + j
        if groups and line.name != "return" and aliases_input(line.target):
            alias[line.name] = groups  # a view keeps the saved bytes in use
    env, source = symbol_env(graph)
    boxes = []
    for p in plan.placements:
        if p.write is Write.NONE:
            continue
        g = saved.groups[p.group]
        names = list(g.members) + ([g.root.name] if g.root is not None else [])
        starts = [fw_pos[n] for n in names if n in fw_pos]
        end = last_read.get(g.id)
        boxes.append(Box(
            group=g.id, members=tuple(g.members), kind=kind_of(p),
            start=min(starts) if starts else 0,
            end=end if end is not None else len(fw),
            offset=evaluate(sympy.sympify(p.offset), env),
            nbytes=evaluate(sympy.sympify(p.nbytes), env),
            read=end is not None,
        ))
    return Timeline(
        forward=tuple(line.name for line in fw),
        backward=tuple(line.name for line in bw),
        boxes=tuple(boxes),
        capacity=evaluate(sympy.sympify(plan.capacity), env),
        env={str(k): v for k, v in sorted(env.items(), key=lambda kv: str(kv[0]))},
        env_source=source,
    )


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
            _message(ax, f"{title}: runs without slots: {g.fallback or 'no plan'}")
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
    from matplotlib.patches import Patch, Rectangle
    from matplotlib.ticker import MaxNLocator

    t = timeline(g)
    plan: ArenaPlan = g.plan
    nf = len(t.forward)
    top = max([t.capacity] + [b.offset + b.nbytes for b in t.boxes] + [1])
    for b in t.boxes:
        ax.add_patch(Rectangle((b.start, b.offset), b.end + 1 - b.start, b.nbytes,
                               facecolor=COLORS[b.kind], edgecolor="black", linewidth=0.6,
                               alpha=0.85, hatch=None if b.read else "//"))
        if b.nbytes >= 0.045 * top and (b.end + 1 - b.start) >= 0.06 * max(t.length, 1):
            more = " …" if len(b.members) > 2 else ""
            label = f"g{b.group} " + ", ".join(b.members[:2]) + more
            ax.text(b.start + 0.5, b.offset + b.nbytes / 2, label, fontsize=7, va="center",
                    ha="left", clip_on=True)
    cap_line = ax.axhline(t.capacity, color="crimson", linewidth=1.4, linestyle="--")
    ax.axvline(nf - 0.5, color="0.3", linewidth=0.8)
    ax.text(nf / 2, 1.0, "forward", transform=ax.get_xaxis_transform(), ha="center",
            va="bottom", fontsize=8, color="0.3")
    ax.text(nf + len(t.backward) / 2, 1.0, "backward", transform=ax.get_xaxis_transform(),
            ha="center", va="bottom", fontsize=8, color="0.3")
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
    cap = sympy.sympify(plan.capacity)
    if cap.is_Integer:
        sub = f"arena per slot {human_bytes(t.capacity)} ({t.capacity} B)"
    else:
        bound = (f", at most {human_bytes(plan.capacity_bound)}"
                 if plan.capacity_bound is not None else ", unbounded")
        by_source: dict[str, list[str]] = {}
        for k, v in t.env.items():
            by_source.setdefault(t.env_source[k], []).append(f"{k}={v}")
        at = "; ".join(f"{', '.join(vs)} ({src})" for src, vs in by_source.items())
        sub = f"arena per slot = {cap} B{bound}; drawn at {at} ({human_bytes(t.capacity)})"
    copied = sympy.sympify(plan.copied_bytes)
    ax.set_title(f"{title}: {len(t.boxes)} storage groups in slots, {sub}; "
                 f"copied per forward {copied} B", fontsize=9, loc="left", wrap=True, pad=12)


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
