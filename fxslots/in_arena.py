"""Gradients in the slot's arena: what a delivering backward needs for the runtime to place
its gradients (and, with ATen kernels, its large temporaries) in saved bytes it has finished
reading (``fxslots.overlay`` plans where, per layout; ``runtime/cudagraphs/delivery.py`` makes
the views). ``with_overlay`` serves ATen kernels, which run in node order; ``fencing`` makes
the pass that serves Inductor's, which do not unless fenced (``passes/fence.py``).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Mapping

import sympy
import torch.fx as fx

from . import _torch
from .fallback import go_without, or_without
from .geometry import span_elements
from .options import Options
from .overlay import END, NEVER, InPlace, Overlay
from .passes.borrow import MIN_BYTES, borrow_arena, borrowable, reinplace, reinplaceable
from .passes.fence import computed_at, fence_writes, fused_reads, plan_fences, unfenced_small
from .passes.lifetimes import read_lifetimes
from .passes.observe import observe
from .runtime.layout import STAGED, ViewLayout, layout_of
from .runtime.variant import Deliver
from .schemas import ArenaPlan, SavedSet, Write

log = logging.getLogger(__name__)


def fencing(d: Deliver, saved: SavedSet, plan: ArenaPlan, options: Options
            ) -> "Fencing | None":
    """The pass that lets Inductor's form of ``d`` write its gradients into the arena, or None:
    the option off, or Inductor might not keep the fences' order (``_torch.fence_hazard``)."""
    if not options.grads_in_arena:
        return None
    hazard = _torch.fence_hazard()
    if hazard is not None:
        go_without(f"gradients in the arena under kernels=\"inductor\": {hazard}; they keep "
                   f"the output buffer (grads_in_arena=False says so without this warning)",
                   options.strict)
        return None
    return Fencing(len(d.outputs), _groups_of_args(saved, plan), _fenceable(plan), _nbytes(d))


class Fencing:
    """Inductor's last post-grad pass over a delivering backward (``_torch.inductor_compile``):
    on the graph Inductor lowers, after its own rewrites (which move reads: its ``mm`` + ``add``
    to ``addmm`` fusion read a saved activation at the add, after gradients had taken its
    bytes), it finds what each node reads and writes (``passes/lifetimes.py``) and fences each
    gradient write after the reads of the bytes the plan may give it (``passes/fence.py``).
    ``overlay`` is then the plan's input, by position in that graph; None until it ran (a
    graph Inductor took from its cache: gradients keep the output buffer)."""

    def __init__(self, n_buffers: int, groups: tuple[tuple[int, int], ...],
                 fenceable: set[int], nbytes: tuple[int, ...]) -> None:
        self.n_buffers, self.groups, self.fenceable, self.nbytes = (n_buffers, groups, fenceable,
                                                                    nbytes)
        self.overlay: Overlay | None = None

    def __call__(self, graph: fx.Graph) -> None:
        reads, firsts = read_lifetimes(graph, self.n_buffers)
        writes = computed_at(graph, firsts)
        # the reads fused into a small gradient's kernel move too, though it takes no fence:
        # another gradient's fence between them and that kernel would split it
        reads = fused_reads(graph, reads, writes)
        writes = unfenced_small(graph, writes, self.nbytes, MIN_BYTES)
        by_group = {g: (at if g in self.fenceable else END)
                    for g, at in _by_group(reads, self.groups).items()}
        fences = plan_fences(writes, by_group, _per_arg(self.groups, len(reads), self.fenceable))
        observe("fence_writes", fence_writes, graph, writes, fences,
                summary=lambda _: f"{sum(map(bool, fences))} of {len(fences)} gradient writes "
                                  f"fenced after the last reads of the bytes they may take")
        log.debug("the fenced graph Inductor lowers:\n%s", graph)
        self.overlay = Overlay(by_group, writes, self.nbytes)


def _fenceable(plan: ArenaPlan) -> set[int]:
    """The storage groups whose saved tensors a fence may declare written. Inductor checks at
    each call the alignment of an input its example showed aligned, and runs a misaligned one
    that its code writes on a copy, copied back after: over a gradient, where the input is
    dead. A group whose first byte sits 16-aligned in its storage and in the arena keeps each
    tensor's alignment (the example's) at every call; staged inputs never lend bytes here."""
    if plan.alignment % 16:
        return set()
    return {p.group for p in plan.placements if p.write.owns_bytes
            and isinstance(p.storage_start, (int, sympy.Integer)) and p.storage_start % 16 == 0}


def with_overlay(d: Deliver, saved: SavedSet, plan: ArenaPlan, options: Options,
                 hints: Mapping[sympy.Symbol, int]) -> Deliver:
    """``d`` with what placing its gradients in the slot's arena needs (``fxslots.overlay``),
    and its temporaries too where they find bytes there (ATen kernels; ``hints``: the value
    of each shape symbol the runtime binds, at the shape compiled); or ``d`` as it was: the
    option off, or the analysis failing."""
    if not options.grads_in_arena:
        return d
    made = or_without(lambda: _overlay(d.graph, d, saved, plan), "placing gradients in the arena",
                      "they go to the output buffer", options.strict)
    if made is None:
        return d
    borrowed = or_without(
        lambda: _with_temporaries(made, d, saved, plan, options.alignment, hints),
        "placing the backward's temporaries in the arena", "they stay in the pool",
        options.strict)
    return dataclasses.replace(d, overlay=borrowed or made)


def _overlay(gm: fx.GraphModule, d: Deliver, saved: SavedSet, plan: ArenaPlan) -> Overlay:
    """What ``gm`` (``d``'s graph, or a twin of it with the same nodes) reads and writes."""
    reads, writes = read_lifetimes(gm, len(d.outputs))
    return Overlay(_by_group(reads, _groups_of_args(saved, plan)), writes, _nbytes(d))


def _groups_of_args(saved: SavedSet, plan: ArenaPlan) -> tuple[tuple[int, int], ...]:
    """(backward argument, storage group) of each saved tensor (STAGED: in a staged input's
    bytes; argument -1: none, the group is read to the end)."""
    staged = {p.group for p in plan.placements if p.write is Write.STAGED}
    return tuple((t.backward_index, STAGED if t.group in staged else t.group)
                 for t in saved.tensors)


def _by_group(reads: tuple[int, ...], groups: tuple[tuple[int, int], ...]) -> dict[int, int]:
    """The last read of each group, of its arguments' (``reads``); END where one is not an
    argument of this graph."""
    by_group: dict[int, int] = {}
    for k, g in groups:
        by_group[g] = max(by_group.get(g, NEVER), reads[k] if 0 <= k < len(reads) else END)
    return by_group


def _nbytes(d: Deliver) -> tuple[int, ...]:
    return tuple(int(span_elements(shape, stride)) * dtype.itemsize
                 for dtype, _, shape, stride in d.geometry)


def _with_temporaries(ov: Overlay, d: Deliver, saved: SavedSet, plan: ArenaPlan,
                      alignment: int, hints: Mapping[sympy.Symbol, int]) -> Overlay:
    """``ov`` with the backward's temporaries that can live in arena bytes at the shape
    compiled (``passes/borrow.py``): results computed over a saved input they read last, then
    the temporaries that find bytes the backward has finished reading, and the graph that
    computes them there. Of symbolic shapes, the runtime places them again at each shape
    (``Overlay.at``), and runs that graph only where every one fits; a temporary whose size
    the runtime cannot evaluate (a symbol it does not bind) stays in the pool."""
    if not plan.capacity.free_symbols <= set(hints):
        return ov
    layout = layout_of(plan, dict(hints))
    base, ov, inplace = _reinplaced(ov, d, saved, plan, layout, alignment)
    found = [t for t in borrowable(base) if _bound(t.nbytes, layout.values)]
    if not found and not inplace:
        return ov
    trial = dataclasses.replace(ov, temps=tuple(found), graph=base, inplace=tuple(inplace))
    _, _, at = trial.at(layout.values).place_at(layout.groups, layout.nbytes, alignment)
    temps = [t for t, off in zip(found, at, strict=True) if off is not None]
    if not temps:
        return dataclasses.replace(trial, temps=()) if inplace else ov
    twin = observe("borrow_arena", borrow_arena, base, temps,
                   summary=lambda g: f"{len(temps)} of {len(found)} temporaries "
                                     f"({sum(t.nbytes for t in temps)} bytes) computed into "
                                     f"arena bytes the backward has finished reading")
    return dataclasses.replace(trial, temps=tuple(temps), graph=twin)


def _reinplaced(ov: Overlay, d: Deliver, saved: SavedSet, plan: ArenaPlan, layout: ViewLayout,
                alignment: int) -> tuple[fx.GraphModule, Overlay, list[InPlace]]:
    """``d``'s graph with the results ``reinplaceable`` finds computed over their saved
    inputs, its overlay (those results' readers read their inputs' groups), and the picks; or
    ``d``'s own, with none: where there are none, or where they would keep more gradient bytes
    out of the arena than they take out of the pool (a result holds its input's bytes until
    its last read, and a gradient written before then cannot have them: a float32 loss head's
    weight gradient, beside the softmax's gradient over the log-probabilities)."""
    inplace = [p for p in reinplaceable(d.graph, _arena_groups(d, saved, plan))
               if _bound(p.nbytes, layout.values)]
    if not inplace:
        return d.graph, ov, []
    base = observe("reinplace", reinplace, d.graph, inplace,
                   summary=lambda g: f"{len(inplace)} results computed over the saved input "
                                     f"they read last")
    over = _overlay(base, d, saved, plan)
    displaced = (_grad_bytes_placed(ov, layout, alignment)
                 - _grad_bytes_placed(over, layout, alignment))
    freed = sum(p.at(layout.values).nbytes for p in inplace)
    if displaced > freed:
        log.debug("fxslots: results over their saved inputs dropped: %d bytes of them would "
                  "send %d gradient bytes to the output buffer", freed, displaced)
        return d.graph, ov, []
    return base, over, inplace


def _bound(nbytes: object, values: Mapping[str, int]) -> bool:
    """Whether the runtime can evaluate ``nbytes`` from the symbols it binds (``values``)."""
    return not isinstance(nbytes, sympy.Basic) or {s.name for s in nbytes.free_symbols} <= set(
        values)


def _grad_bytes_placed(ov: Overlay, layout: ViewLayout, alignment: int) -> int:
    """The gradient bytes ``ov`` places in the arena at ``layout``."""
    _, at, _ = dataclasses.replace(ov, temps=()).place_at(layout.groups, layout.nbytes,
                                                          alignment)
    return sum(n for n, off in zip(ov.nbytes, at, strict=True) if off is not None)


def _arena_groups(d: Deliver, saved: SavedSet, plan: ArenaPlan) -> list[int | None]:
    """Per argument placeholder of ``d``'s graph: the storage group whose own slot bytes it
    reads, or None (a parameter, an input, a staged or offloaded value, not a saved tensor)."""
    n_args = len(list(d.graph.graph.find_nodes(op="placeholder"))) - len(d.outputs)
    owns = {p.group for p in plan.placements if p.write.owns_bytes}
    return _per_arg(_groups_of_args(saved, plan), n_args, owns)


def _per_arg(groups: tuple[tuple[int, int], ...], n_args: int, keep: set[int]
             ) -> list[int | None]:
    """Per argument placeholder (of ``n_args``): its storage group (``groups``: ``_groups_of_
    args``) where that is one of ``keep``, else None."""
    out: list[int | None] = [None] * n_args
    for k, g in groups:
        if 0 <= k < n_args and g in keep:
            out[k] = g
    return out
