"""Offload policies: which saved groups go to the slot's pinned host arena, each with its reason.

A policy takes the saved set, its argument and the cost context, and returns
``{group id: (offloaded?, why)}`` for every group it could offload. ``options={"offload": ...}``
selects one: "none", "all", "above:<bytes>", "auto" or "auto:<share>", an int (a budget of
device bytes per slot), or a predicate over a ``SavedTensor``. Every slotted group gets a
reason, those no policy can move too (``offload_sizes.why_not_offloadable``).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

import sympy
import torch.fx as fx

from . import _torch
from .costs import DeviceCaps, graph_seconds
from .offload_sizes import (
    at_sizes, bytes_at, growing, hints_of, offloadable, over_budget, sizes_text,
    why_not_offloadable,
)
from .printing import mib
from .schemas import SavedSet, Source

log = logging.getLogger(__name__)
Decisions = dict[int, tuple[bool, str]]


@dataclass(frozen=True)
class OffloadContext:
    """What a policy may weigh: device rates and, per group, when the forward produces it."""

    caps: DeviceCaps
    forward_seconds: float
    backward_seconds: float
    produced_at: dict[int, float]  # group -> estimated forward time when its producer ends
    sizes: dict[int, int]  # group -> bytes at the shape being compiled (its size hints)
    needed_at: dict[int, float]  # group -> estimated backward time when its first reader starts
    hints: dict = field(default_factory=dict)  # shape symbol -> the value being compiled for
    shape_env: Any = None  # where auto's and a budget's bounds become guards (None: static)
    may_bound: bool = False  # whether one more compile of this frame stays in Dynamo's limit
    kept: dict = field(default_factory=dict)  # group -> device arena bytes if kept (aligned)

    @classmethod
    def of(cls, saved: SavedSet, fw: fx.GraphModule, bw: fx.GraphModule,
           caps: DeviceCaps) -> "OffloadContext":
        t, produced = 0.0, {}
        owner = {name: g.id for g in saved.groups
                 for name in (*g.members, *([g.root.name] if g.root else []))}
        for n, s in graph_seconds(fw, caps):
            t += s
            if n.name in owner:
                produced.setdefault(owner[n.name], t)
        back, needed = 0.0, {}
        for n, s in graph_seconds(bw, caps):
            for a in n.all_input_nodes:
                if a.op == "placeholder" and a.name in owner:
                    needed.setdefault(owner[a.name], back)
            back += s
        hints = hints_of(fw)
        sizes = {g.id: bytes_at(saved, g.nbytes, hints) for g in saved.groups}
        env = _torch.shape_env_of([p.meta.get("val")
                                   for p in fw.graph.find_nodes(op="placeholder")])
        # Dynamo counts every compile of the frame (fallbacks, grad modes...) toward its limit
        return cls(caps, t, back, produced, sizes, needed, hints, env,
                   _torch.frame_compiles() < _torch.recompile_limit() // 2)


def offload_none(saved: SavedSet, arg: Any, ctx: OffloadContext) -> Decisions:
    return {}


def offload_all(saved: SavedSet, arg: Any, ctx: OffloadContext) -> Decisions:
    return {g.id: (True, "offload='all'") for g in offloadable(saved)}


def offload_above(saved: SavedSet, arg: Any, ctx: OffloadContext) -> Decisions:
    """A group goes when its bytes reach ``arg`` at the sizes being compiled (not at the least
    the symbols allow, a size that may never run), which its reason names, as a predicate's."""
    out = {}
    for g in offloadable(saved):
        n, at = ctx.sizes[g.id], sizes_text(ctx.hints, g.nbytes.free_symbols)
        out[g.id] = (n >= arg, f"{mib(n)} {'>=' if n >= arg else '<'} {arg} B (above:{arg}"
                               + (f"; decided at {at})" if at else ")"))
    return out


def offload_budget(saved: SavedSet, arg: Any, ctx: OffloadContext) -> Decisions:
    """Offload the largest groups until what the rest holds of the device arena per slot fits
    ``arg``: each group at its bytes there, aligned (``ctx.kept``, from ``plan_arena``: padded
    to 512, 40 groups of 16 B hold 20 KiB), at the sizes being compiled (``choose_offload``
    bounds a dynamic graph to them). A group that cannot move says why, and whether the
    budget is met without it."""
    kept = {i: bytes_at(saved, e, ctx.hints) for i, e in ctx.kept.items()}
    device, label, out = sum(kept.values()), f"budget {mib(arg)}", {}
    for g in sorted(offloadable(saved), key=lambda g: -kept[g.id]):
        if device > arg:
            device -= kept[g.id]
            out[g.id] = (True, f"{label}: {mib(kept[g.id])} of the device arena, one of "
                               "the largest")
        else:
            out[g.id] = (False, f"{label}: the rest fits ({mib(device)} of the device arena)")
    over = f"; {mib(device)} stay on the device, over the budget" if device > arg else ""
    groups = {g.id: g for g in saved.groups}
    for i in kept.keys() - out.keys():
        out[i] = (False, f"{label}: {why_not_offloadable(saved, groups[i])}{over}")
    return out


# The share of the forward's (and backward's) time that "auto" fills with copies. Copies beside
# compute slow it even where they hide, mostly by a part that does not shrink with the bytes
# (runs 28 and 47-50, docs/design.md "A share of the link"), so the default fills the link and
# "auto:<share>" trades bytes for time.
AUTO_SHARE = 1.0


def offload_auto(saved: SavedSet, arg: Any, ctx: OffloadContext) -> Decisions:
    """What the link carries under compute: copies queue on one stream in the order the
    forward produces them; a group goes when its copy ends within the first ``share`` of the
    forward (``arg``, or ``AUTO_SHARE``), every chosen group's reload can end within that share
    of the backward's time before its first read (one queue, the earliest needed first: a group
    the backward reads at once would only make it wait), and it is large enough to pay for a
    copy (``DeviceCaps.worth_a_copy``)."""
    caps, share, free, reloads, out = ctx.caps, arg or AUTO_SHARE, 0.0, [], {}
    until = share * ctx.forward_seconds
    within = (f"the first {until * 1e3:.3f} ms of a {ctx.forward_seconds * 1e3:.3f} ms "
              f"forward{f' (share {share:g})' if share < 1 else ''}")
    for g in sorted(offloadable(saved), key=lambda g: ctx.produced_at.get(g.id, 0.0)):
        n = ctx.sizes[g.id]
        took = caps.transfer_seconds(n)
        end = max(free, ctx.produced_at.get(g.id, 0.0)) + took
        what = f"{mib(n)}, {took * 1e3:.3f} ms at {caps.link / 1e9:.0f} GB/s"
        reload = (share * ctx.needed_at.get(g.id, ctx.backward_seconds), took)
        if not caps.worth_a_copy(n):
            out[g.id] = (False, f"auto: {mib(n)} frees less than a copy costs "
                                f"({caps.copy_latency * 1e6:.0f} us)")
        elif end <= until and reloads_fit([*reloads, reload]):
            free = end
            reloads.append(reload)
            out[g.id] = (True, f"auto: {what}, copied by {end * 1e3:.3f} ms, within {within}, "
                               f"reloaded before {reload[0] * 1e3:.3f} ms of the backward")
        else:
            out[g.id] = (False, f"auto: {what} would not hide under compute within {within}")
    return out


def reloads_fit(reloads: list[tuple[float, float]]) -> bool:
    """Whether reloads ``(needed at, transfer time)`` on one queue from the backward's start,
    the earliest needed first, each end by the time they are needed."""
    t = 0.0
    for needed, took in sorted(reloads):
        t += took
        if t > needed:
            return False
    return True


def offload_if(predicate: Callable[[Any], bool]):
    """A group goes when ``predicate`` is true for a member, at the sizes being compiled for (a
    comparison of symbolic sizes has no truth value): ``fxslots.prepare`` compiles the largest
    first, and the choice holds at every shape the graph runs."""
    def policy(saved: SavedSet, arg: Any, ctx: OffloadContext) -> Decisions:
        name = getattr(predicate, "__name__", predicate)
        at = sizes_text(ctx.hints, ctx.hints)
        return {g.id: (any(predicate(at_sizes(saved.tensor(m), ctx.hints)) for m in g.members),
                       f"predicate {name}" + (f" (decided at {at})" if at else ""))
                for g in offloadable(saved)}
    return policy


OFFLOAD: dict[str, Callable[[SavedSet, Any, OffloadContext], Decisions]] = {
    "none": offload_none,
    "all": offload_all,
    "above": offload_above,  # "above:1048576"
    "auto": offload_auto,
}


def parse_offload(spec: Any) -> tuple[Callable, Any]:
    """The policy and its argument for an ``offload`` option; ValueError names the forms."""
    if callable(spec):
        return offload_if(spec), None
    if isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0:
        return offload_budget, spec
    name, sep, arg = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    valid, value = _argument(name, sep, arg)
    if not valid:
        raise ValueError(
            "fxslots option 'offload' must be 'none', 'all', 'auto', 'auto:<share>' (a share "
            "of the link's time under compute, above 0 and at most 1), 'above:<bytes>', a "
            "budget of device bytes per slot (an int >= 0) or a predicate over a saved tensor, "
            f"got {spec!r}")
    return OFFLOAD[name], value


def _argument(name: str, sep: str, arg: str) -> tuple[bool, int | float | None]:
    """Whether ``name`` (``sep`` ``arg``) is a valid ``offload`` spec, and its argument (None:
    none)."""
    if name == "above":
        return arg.isdigit(), int(arg) if arg.isdigit() else None
    if name == "auto" and sep:
        try:
            share = float(arg)
        except ValueError:
            return False, None
        return 0 < share <= 1, share
    return name in OFFLOAD and not sep, None


WINDOW_FLOOR = 64 * 2**20


def offload_window(spec: Any, sizes: list[int]) -> int:
    """The device bytes offload transfers may hold at once (``options.offload_window``) for
    offloaded groups of ``sizes``: "auto" takes twice the largest (one copy on the link while
    the next waits its turn, so the link never idles for want of room) and at least 64 MiB
    (where groups are small, a few in flight keep the link busy past each copy's fixed cost)."""
    if spec != "auto":
        return int(spec)
    return max(2 * max(sizes, default=0), WINDOW_FLOOR)


def choose_offload(spec: Any, saved: SavedSet, ctx: OffloadContext
                   ) -> tuple[Decisions | Callable[[Mapping], Decisions], Callable[[], None]]:
    """The policy's decisions, with a reason for every slotted group (those no policy can move
    say why), and what to run once the plan they went into is accepted: the guards that bound
    auto's and a budget's choice to the sizes it was made at, an unmet budget's warning (a
    graph that falls back offloads nothing, and must not be guarded). A budget decides once
    ``plan_arena`` gives it what each group holds of the device arena."""
    policy, arg = parse_offload(spec)
    made: dict[str, Any] = {"bounds": (), "unmet": None}
    label = (f"predicate {getattr(spec, '__name__', spec)}" if callable(spec)
             else f"offload={spec!r}")

    def decide(kept: Mapping | None = None) -> Decisions:
        c = ctx if kept is None else replace(ctx, kept=dict(kept))
        decisions = policy(saved, arg, c)
        for g in saved.groups:
            if g.source is Source.INTERMEDIATE and g.id not in decisions:
                decisions[g.id] = (False, f"{label}: {why_not_offloadable(saved, g)}")
        if policy is offload_budget:
            stay = {i: e for i, e in c.kept.items() if not decisions[i][0]}
            made["unmet"] = over_budget(saved, arg, stay, c.hints)
        # An unmet budget moved all it could: a larger shape would choose the same, unguarded
        if policy in (offload_auto, offload_budget) and not made["unmet"]:
            made["bounds"] = bound_to_hints(saved, decisions, c, spec)
        return decisions

    def commit() -> None:
        for s, hint in made["bounds"]:
            _torch.guard_at_most(ctx.shape_env, s, hint)
        if made["unmet"]:
            warnings.warn(made["unmet"], stacklevel=2)
    return (decide if policy is offload_budget else decide()), commit


def bound_to_hints(saved: SavedSet, decisions: Decisions, ctx: OffloadContext,
                   spec: Any = "auto") -> tuple:
    """Auto's choice holds up to the shape it was timed at: a larger one moves more bytes under
    compute that grows less, so the copies stop hiding (H200 run 27c: planned at sequence 256,
    run at 512, 1.27x no offload); a budget's, up to the shape it weighed (a larger one keeps
    more bytes on the device). So such a dynamic graph is guarded on its sizes (``growing``)
    being at most those: Dynamo compiles a larger shape again, planned at its own size.
    Returns those (symbol, hint) bounds; none within a range the user gave (``mark_dynamic``
    min/max: a guard below it fails the compile) or past half Dynamo's recompile limit (the
    plan stands, with a warning), and none on a marked size at its least value (a guard there
    would pin it, which Dynamo refuses too). ``spec``: the option (an int is a budget)."""
    symbols, annotate, risk = growing(saved, decisions, ctx.kept, isinstance(spec, int))
    symbols = sorted(symbols & set(ctx.hints), key=str)
    if not symbols or ctx.shape_env is None:
        return ()
    at = sizes_text(ctx.hints, symbols)
    if _torch.declares_ranges(marked=True):
        symbols = [s for s in symbols
                   if _torch.symbol_range(ctx.shape_env, s)[0] < ctx.hints[s]]
    ranged = _torch.declares_ranges()
    if ranged or not symbols or not ctx.may_bound:
        why = ("an input has a size range of its own (mark_dynamic min/max)" if ranged
               else "a size marked dynamic is at its least value" if not symbols
               else "Dynamo's recompile limit is near")
        log.warning("fxslots: offload=%r planned this graph at %s and it will run larger "
                    "shapes too, where %s (%s); fxslots.prepare(model, examples) compiles "
                    "the largest first", spec, at, risk, why)
        return ()
    log.info("offload=%r planned at %s: this graph runs shapes up to those; a larger one "
             "compiles again", spec, at)
    for i in annotate:
        took, why = decisions[i]
        decisions[i] = (took, f"{why} (planned at {at}; larger shapes compile again)")
    return tuple((s, ctx.hints[s]) for s in symbols)
