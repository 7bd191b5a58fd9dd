"""An arena plan laid on its graphs' timeline, as plain data (``fxslots.plot`` draws it).

x is the node order the compile recorded (``CompiledGraphs.forward_lines`` then
``backward_lines``: the rewritten graphs that ``str(report)`` prints); each storage group is a box
from its producer in the forward to its last reader in the backward, at its byte offset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import sympy

from .schemas import ArenaPlan, Placement, SavedSet, Write, evaluate

KINDS = ("copy-free", "copied", "offloaded")
"""How a group's bytes reach its slot; every kind has a colour in the legend."""

DEFAULT_SYMBOL_VALUE = 64
"""What an unbounded shape symbol is drawn at when the explained step did not bind it."""


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
    if p.write is Write.OFFLOAD:
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
    plan: ArenaPlan = graph.plan
    if plan is None:
        raise ValueError("fxslots.plot: this graph has no plan (it runs without slots)")
    fw, bw = graph.forward_lines, graph.backward_lines
    env, source = symbol_env(graph)
    return Timeline(
        forward=tuple(line.name for line in fw),
        backward=tuple(line.name for line in bw),
        boxes=tuple(_boxes(graph.saved, plan, fw, bw, env)),
        capacity=evaluate(sympy.sympify(plan.capacity), env),
        env={str(k): v for k, v in sorted(env.items(), key=lambda kv: str(kv[0]))},
        env_source=source,
    )


def _last_reads(saved: SavedSet, fw, bw) -> dict[int, int]:
    """Timeline index of the last backward line reading each group's bytes (or a view of them)."""
    last_read: dict[int, int] = {}
    alias: dict[str, set[int]] = {m: {g.id} for g in saved.groups for m in g.members}
    for j, line in enumerate(bw):
        groups = set().union(*(alias.get(r, set()) for r in line.reads))
        for gid in groups:
            last_read[gid] = len(fw) + j
        if groups and line.aliases:
            alias[line.name] = groups  # a view keeps the saved bytes in use
    return last_read


def _boxes(saved: SavedSet, plan: ArenaPlan, fw, bw, env) -> list[Box]:
    fw_pos: dict[str, int] = {}
    for i, line in enumerate(fw):
        fw_pos.setdefault(line.name, i)
    last_read = _last_reads(saved, fw, bw)
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
    return boxes
