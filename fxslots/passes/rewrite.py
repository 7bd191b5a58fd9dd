"""Rewrite: make the forward graph leave its saved tensors in the slot the plan gives them.

The runtime appends one placeholder per slot view (in ``plan.views`` order). A copy-free group's
producer becomes its out= form writing into the view; a copied group gets ``copy_`` nodes right
after its producers. The forward then returns the slot views where it returned saved tensors,
so the backward reads every saved tensor from the slot.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from .. import streams
from .._torch import size_hint
from ..schemas import ArenaPlan, SavedSet, Write
from .collect import resolve_overload

aten = torch.ops.aten

SLOT_META = "fxslots"  # node.meta key: what the rewrite did at this node, for printing


def rewrite_forward(fw: fx.GraphModule, saved: SavedSet, plan: ArenaPlan,
                    num_fwd_outputs: int) -> int:
    """Apply ``plan`` to ``fw`` in place; returns the number of nodes changed or added."""
    graph = fw.graph
    nodes = {n.name: n for n in graph.nodes}
    slot_ph = _add_view_placeholders(graph, plan)
    changed = len(slot_ph)
    replace: dict[str, fx.Node] = {}
    for p in plan.placements:
        if p.write is Write.OUT:
            view = p.views[0]
            _write_out(nodes[view.holds], slot_ph[view.name],
                       resolve_overload(saved.groups[p.group].root.out_overload), p)
            changed += 1
        elif p.write in (Write.COPY, Write.OFFLOAD):
            views = {v.holds: v for v in p.views}
            for name in p.copies:
                replace[name] = _insert_copy(graph, nodes[name], slot_ph[views[name].name],
                                             views[name].stride, p)
                changed += 1
            for holds, view in views.items():
                replace.setdefault(holds, slot_ph[view.name])
    _return_slot_views(graph, replace, num_fwd_outputs)
    graph.lint()
    fw.recompile()
    return changed


def _add_view_placeholders(graph: fx.Graph, plan: ArenaPlan) -> dict[str, fx.Node]:
    last = list(graph.find_nodes(op="placeholder"))[-1]
    out = {}
    with graph.inserting_before(last.next):
        for view in plan.views:
            ph = graph.placeholder(view.name)
            ph.meta[SLOT_META] = view
            out[view.name] = ph
    return out


def _write_out(node: fx.Node, view: fx.Node, out_op, p) -> None:
    node.target = out_op
    node.kwargs = {**node.kwargs, "out": view}
    node.meta[SLOT_META] = _note(p)


def _insert_copy(graph: fx.Graph, src: fx.Node, dst: fx.Node, stride, p) -> fx.Node:
    with graph.inserting_before(src.next):
        s, d = src, dst
        # An expanded (stride-0) dimension holds one value: copy one slice of it, because
        # copy_ refuses to write a destination whose elements overlap.
        for dim, st in enumerate(stride):
            if st == 0:
                s = graph.call_function(aten.slice.Tensor, (s, dim, 0, 1))
                d = graph.call_function(aten.slice.Tensor, (d, dim, 0, 1))
        if p.write is Write.OFFLOAD:
            # copy_ to host memory goes through a pageable temporary (synchronous, and illegal
            # in a capture) unless both sides are contiguous: walk the dense tensor in memory
            # order. The planner only offloads groups that one dense copy moves.
            order = _memory_order(src)
            if order != sorted(order):
                s = graph.call_function(aten.permute.default, (s, order))
                d = graph.call_function(aten.permute.default, (d, order))
            # Device to pinned host memory on a side stream: asynchronous, and capturable.
            copy = graph.call_function(streams.offload, (d, s))
        else:
            copy = graph.call_function(aten.copy_.default, (d, s))
    copy.meta[SLOT_META] = _note(p)
    # The slot view itself carries the full (expanded) layout the backward expects.
    return copy if d is dst and p.write is not Write.OFFLOAD else dst


def _memory_order(node: fx.Node) -> list[int]:
    """Dimensions from the largest stride to the smallest (ties keep their order)."""
    strides = [size_hint(st) for st in node.meta["val"].stride()]
    return sorted(range(len(strides)), key=lambda i: -strides[i])


def _note(p) -> str:
    arena = "host arena, on the d2h side stream," if p.write is Write.OFFLOAD else "slot"
    return f"{p.write.value}: {arena} bytes [{p.offset}, {p.offset + p.nbytes}) hold group {p.group}"


def _return_slot_views(graph: fx.Graph, replace: dict[str, fx.Node], num_fwd_outputs: int) -> None:
    output = next(iter(graph.find_nodes(op="output")))
    outs = list(output.args[0])
    for i in range(num_fwd_outputs, len(outs)):
        n = outs[i]
        if isinstance(n, fx.Node) and n.name in replace:
            outs[i] = replace[n.name]
    output.args = (tuple(outs),)


def annotate_backward(bw: fx.GraphModule, saved: SavedSet, plan: ArenaPlan) -> None:
    """Mark each backward placeholder that arrives as a slot view with where it lives."""
    for ph in bw.graph.find_nodes(op="placeholder"):
        t = next((t for t in saved.tensors if t.name == ph.name), None)
        if t is None:
            continue
        p = plan.placement(t.group)
        if p.write is Write.STAGED:
            ph.meta[SLOT_META] = "read from slot: a view of a staged input"
        elif p.write is Write.OFFLOAD:
            g = saved.groups[t.group]
            ph.meta[SLOT_META] = (f"in the host arena, reloaded ahead of use: group "
                                  f"{t.group} at host byte "
                                  f"{p.offset + t.storage_offset * t.itemsize - g.byte_start}")
        elif p.write is not Write.NONE:
            g = saved.groups[t.group]
            ph.meta[SLOT_META] = (f"read from slot: group {t.group} at byte "
                                  f"{p.offset + t.storage_offset * t.itemsize - g.byte_start}")
