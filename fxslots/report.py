"""``fxslots.explain``: compile, run one forward and backward, show what fxslots did."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from . import state
from .options import Options
from .prepare import restored
from .runtime.cudagraphs.executor import GraphExecutor
from .runtime.cudagraphs.room import describe_room
from .printing import format_arena_grads, format_graph, format_plan
from .schemas import ArenaPlan, SavedSet, SlotView, Write


@dataclass
class Report:
    """The rewritten graphs, the plan table and the totals of every graph compiled."""

    graphs: list[Any]  # record.CompiledGraphs, in compile order
    slots: list[dict[str, Any]] = field(default_factory=list)  # the ring after the step

    def __str__(self) -> str:
        if not self.graphs:
            return ("no graph was compiled with fxslots in the explained step: Dynamo ran the "
                    "model without compiling it (TORCH_LOGS=graph_breaks says why)")
        parts = [line for i, g in enumerate(self.graphs) for line in _describe(i, g)]
        room = _room(self.graphs)
        if room is not None:
            parts += ["----- CUDA graph pool -----", room]
        return "\n".join(parts)

    @property
    def plans(self) -> list[tuple[SavedSet, ArenaPlan]]:
        return [(g.saved, g.plan) for g in self.graphs if g.plan is not None]

    def to_json(self) -> str:
        return json.dumps({
            "graphs": [json.loads(plan_to_json(s, p)) for s, p in self.plans],
            "slots": self.slots,
        }, indent=1)

    def plot(self, path: str) -> str:
        from .plot import plot_report

        return plot_report(self, path)


def plan_to_json(saved: SavedSet, plan: ArenaPlan) -> str:
    """The plan as JSON: sizes and offsets as strings (sympy expressions when symbolic)."""
    groups = {g.id: g for g in saved.groups}
    return json.dumps({
        "capacity": str(plan.capacity),
        "capacity_bound": plan.capacity_bound,
        "alignment": plan.alignment,
        "copied_bytes": str(plan.copied_bytes),
        "host_capacity": str(plan.host_capacity),
        "offloaded_bytes": str(plan.offloaded_bytes),
        "staged_bytes": str(plan.staged_bytes),
        "staging": [_view_json(v) for v in plan.staging],
        "groups": [{
            "group": p.group,
            "source": groups[p.group].source.value,
            "write": p.write.value,
            "arena": "host" if p.write is Write.OFFLOAD else "device",
            "offset": str(p.offset),
            "nbytes": str(p.nbytes),
            "copies": list(p.copies),
            "reason": p.reason,
            "views": [_view_json(v) for v in p.views],
            "members": [{
                "name": t.name,
                "dtype": str(t.dtype).replace("torch.", ""),
                "shape": [str(s) for s in t.shape],
                "stride": [str(s) for s in t.stride],
                "storage_offset": str(t.storage_offset),
                "nbytes": str(t.nbytes),
            } for t in (saved.tensor(m) for m in groups[p.group].members)],
        } for p in plan.placements],
    }, indent=1)


def _view_json(v: SlotView) -> dict[str, Any]:
    """A tensor the runtime makes over the slot's arena: where the graph finds a saved value
    (its byte offset from the arena's first byte)."""
    return {"name": v.name, "holds": v.holds, "arena": "host" if v.host else "device",
            "dtype": str(v.dtype).replace("torch.", ""), "shape": [str(s) for s in v.shape],
            "stride": [str(s) for s in v.stride],
            "byte_offset": str(v.storage_offset * v.dtype.itemsize)}


@contextlib.contextmanager
def recording() -> Iterator[list[Any]]:
    """Collect what every fxslots compile inside the block produced."""
    rec: list[Any] = []
    state.recorders.append(rec)
    try:
        yield rec
    finally:
        state.recorders.remove(rec)


def explain(model: torch.nn.Module, *args: Any, dynamic: bool | None = None,
            **options: Any) -> Report:
    """Compile ``model`` with fxslots, run one forward and backward on ``args``, and report.

    Checks ``options`` first. Resets Dynamo's caches before the step, so the model is compiled
    afresh even if it ran before, and after it, so nothing of its compile stays in Dynamo's
    cache (nor counts toward its recompile limit). Its regions are its own: it joins none of
    an earlier compile's and none joins it. The model's gradients, buffers (BatchNorm's running
    statistics) and the random number generators are put back after the run, as
    ``fxslots.prepare`` does.
    """
    Options.parse(options)
    torch.compiler.reset()
    module = model if isinstance(model, torch.nn.Module) else None
    try:
        with state.own_regions(), recording() as rec, restored(module, "fxslots.explain"):
            compiled = torch.compile(model, backend="fxslots", options=options, dynamic=dynamic)
            out = compiled(*args)
            outs = [o for o in _flatten(out) if isinstance(o, torch.Tensor) and o.requires_grad]
            if outs:
                torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
            return Report(rec, _slots(rec))
    finally:
        torch.compiler.reset()


def _slots(rec: list[Any]) -> list[dict[str, Any]]:
    slots = []
    rings = {id(g.variant.ring): g.variant.ring for g in rec if g.variant is not None}
    for ring in rings.values():
        for s in ring.slots:
            slots.append({"ring": ring.name, "slot": s.index, "bytes": s.nbytes,
                          "host_bytes": s.host_nbytes, "variant": s.variant,
                          "microbatch": s.microbatch,
                          "pending": s.pending()})
    return slots


def _describe(i: int, g: Any) -> list[str]:
    """One compiled graph: its graphs, plan and notes, as ``explain`` prints them."""
    title = f"graph {i}" + (f" ({g.variant.name} of {g.variant.ring.name})"
                            if g.variant is not None else "")
    parts = [f"===== {title} ====="]
    if g.inference:
        return parts + [f"an inference graph (no backward, no slot): {g.inference}",
                        g.forward_after]
    if g.fallback:
        parts.append(f"runs without slots: {g.fallback}")
    parts.append("----- forward (rewritten) -----")
    parts.append(g.forward_after)
    if g.variant is not None and g.variant.deliver_forward is not None:
        parts.append("----- forward, delivering its outputs into its slot's output "
                     "buffer (what CUDA graphs replay) -----")
        parts.append(format_graph(g.variant.deliver_forward.graph))
    parts.append("----- backward -----")
    parts.append(g.backward or "(not compiled)")
    if g.delivering:
        parts.append("----- backward, delivering its gradients into the output buffer "
                     "(what CUDA graphs replay) -----")
        parts.append(g.delivering)
    if g.plan is not None:
        parts.append("----- plan -----")
        parts.append(format_plan(g.saved, g.plan))
    if g.partitioner:
        parts.append(f"partitioned by: {g.partitioner}")
    if g.recomputed:
        parts.append(f"recomputed in backward instead of saved (recompute="
                     f"{g.recompute!r}): {', '.join(g.recomputed)}")
    parts.extend(_arena_grads(g.variant))
    if g.kernels:  # kernels="inductor": who writes each group's slot bytes
        parts.append("----- Inductor's slot writes (read from its code) -----")
        parts.extend(g.kernels)
    return parts


def _arena_grads(variant: Any) -> list[str]:
    """Under CUDA graphs with ATen kernels: where each gradient goes, at each layout seen."""
    d = None if variant is None else variant.deliver
    if d is None or d.overlay is None:
        return []
    parts = []
    for layout in variant.layouts.values():
        capacity = max([s.nbytes for s in variant.ring.slots] + [layout.nbytes])
        parts.append(f"----- gradients in the arena at {dict(layout.key) or 'its one shape'} "
                     f"(once the loop drops .grad before each forward) -----")
        parts.append(format_arena_grads(d, layout, capacity, variant.ring.options.alignment))
    return parts


def _room(graphs: list[Any]) -> str | None:
    """The graph pool's room (``runtime.cudagraphs.room``), where variants capture CUDA graphs."""
    variants = [g.variant for g in graphs if g.variant is not None
                and isinstance(g.variant.executor, GraphExecutor)]
    return describe_room(variants) if variants else None


def _flatten(x: Any) -> list[Any]:
    if isinstance(x, (list, tuple)):
        return [y for e in x for y in _flatten(e)]
    if isinstance(x, dict):
        return [y for e in x.values() for y in _flatten(e)]
    return [x]
