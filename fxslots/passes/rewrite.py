"""Rewrite: make the forward graph leave its saved tensors in the slot the plan gives them.

The runtime appends one placeholder per slot view (in ``plan.views`` order). A copy-free group's
producer writes into its view: its out= form (for an op with several outputs, one call with a
slot view or a scratch tensor per output), or ``copy_`` for an op that is itself a copy. A
copied group gets ``copy_`` nodes right after its producers. The forward then returns the slot
views where it returned saved tensors, so the backward reads every saved tensor from the slot.
"""

from __future__ import annotations

import operator
from typing import Any, Callable

import torch
import torch.fx as fx

from .. import streams
from ..seeds import unread_seed
from .._torch import size_hint
from ..routes import (
    COPY, EXPANSIONS, copy_source, out_arguments, out_kwargs, out_returns, resolve,
    updated_arguments,
)
from ..schemas import SLOT_META, ArenaPlan, Placement, Root, SavedSet, SavedTensor, Write
from .expand import expand
from .layouts import static_layout
from .observe import at_node

aten = torch.ops.aten



def rewrite_forward(fw: fx.GraphModule, saved: SavedSet, plan: ArenaPlan,
                    num_fwd_outputs: int) -> int:
    """Apply ``plan`` to ``fw`` in place; returns the number of nodes changed or added."""
    graph = fw.graph
    nodes = {n.name: n for n in graph.nodes}
    slot_ph = _add_view_placeholders(graph, plan)
    changed = len(slot_ph)
    replace: dict[str, fx.Node] = {}
    writes: dict[str, dict[int, tuple[fx.Node, Placement, Root]]] = {}
    for p in plan.placements:
        if p.write is Write.OUT:
            root = saved.groups[p.group].root
            writes.setdefault(root.producer or root.name, {})[root.output] = (
                slot_ph[p.views[0].name], p, root)
        elif p.write in (Write.COPY, Write.OFFLOAD):
            views = {v.holds: v for v in p.views}
            for name in p.copies:
                with at_node(name):
                    replace[name] = _insert_copy(graph, nodes[name], slot_ph[views[name].name],
                                                 views[name].stride, p)
                changed += 1
            for holds, view in views.items():
                replace.setdefault(holds, slot_ph[view.name])
    for op_name, outs in writes.items():
        with at_node(op_name):
            changed += _write_in_place(graph, nodes[op_name], outs)
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


def _write_in_place(graph: fx.Graph, node: fx.Node,
                    outs: dict[int, tuple[fx.Node, Placement, Root]]) -> int:
    """Make ``node`` write the outputs in ``outs`` (by output index) into their slot views."""
    view, p, root = next(iter(outs.values()))
    node.meta[SLOT_META] = "; ".join(_note(q) for _, q, _ in outs.values())
    if root.out_overload == COPY:  # clone(x) -> copy_(slot, x): the same one copy
        node.args = (view, node.args[copy_source(node.target)])
        node.target, node.kwargs = aten.copy_.default, {}
        return 1
    if EXPANSIONS.get(node.target, ("",))[0] == root.out_overload:
        return expand(graph, node, {k: v for k, (v, _, _) in outs.items()})
    out_op = resolve(root.out_overload)
    names = out_arguments(out_op)
    if root.producer is None:
        node.target, node.kwargs = out_op, {**out_kwargs(out_op, node.kwargs), names[0]: view}
        return 1
    kwargs = out_kwargs(out_op, node.kwargs)
    with graph.inserting_before(node):
        for name, k in zip(names, out_returns(out_op), strict=True):
            kwargs[name] = outs[k][0] if k in outs else _scratch(graph, node, k)
        args = list(node.args)
        for j, pos in enumerate(updated_arguments(out_op)):
            # A functional form (``foo_functional``) returns updated copies of the buffers
            # ``foo.out`` updates in place: give it those copies, in the slot when saved.
            k = len(names) + j
            dest = (graph.call_function(aten.copy_.default, (outs[k][0], args[pos]))
                    if k in outs else graph.call_function(aten.clone.default, (args[pos],)))
            args[pos] = dest
            _replace_output(node, k, dest)
    node.target, node.args, node.kwargs = out_op, tuple(args), kwargs
    return 1 + len(names)


def _scratch(graph: fx.Graph, node: fx.Node, k: int) -> fx.Node:
    """Memory for an output nobody saves: its exact layout when static; with symbolic sizes an
    empty tensor the out= kernel resizes (out= kernels resize an empty output silently)."""
    v = node.meta["val"][k]
    if static_layout(v):
        s = graph.call_function(aten.empty_strided.default, (list(v.shape), list(v.stride())),
                                {"dtype": v.dtype, "device": v.device})
    else:
        s = graph.call_function(aten.empty.memory_format, ([0],),
                                {"dtype": v.dtype, "device": v.device})
    s.meta[SLOT_META] = f"scratch for output {k} of {node.name} (not saved)"
    return s


def _replace_output(node: fx.Node, k: int, value: fx.Node) -> None:
    """``node[k]`` becomes ``(value,)[0]``: the same tensor, and the getitem keeps its name,
    place and metadata for the copies and outputs that name it."""
    for user in list(node.users):
        if user.target is operator.getitem and user.args[1] == k:
            user.args = ((value,), 0)


def _insert_copy(graph: fx.Graph, src: fx.Node, dst: fx.Node, stride, p) -> fx.Node:
    with graph.inserting_before(src.next):
        s, d = src, dst
        # An expanded (stride-0) dimension holds one value: copy one slice of it, because
        # copy_ refuses to write a destination whose elements overlap.
        for dim, st in enumerate(stride):
            if st == 0:
                s = graph.call_function(aten.slice.Tensor, (s, dim, 0, 1))
                d = graph.call_function(aten.slice.Tensor, (d, dim, 0, 1))
        if unread_seed(src):
            # A dropout seed the backward never reads: zeros, not a copy of what may be an
            # empty host tensor (PyTorch's efficient attention without dropout). fill_, not
            # zero_: Inductor lowers fill_ and refuses zero_ (both a fallback and a decomp).
            copy = graph.call_function(aten.fill_.Scalar, (d, 0))
        elif p.write is Write.OFFLOAD:
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
    """Mark each backward placeholder that arrives as a slot view with where it lives (found
    by position: the backward may name a saved value differently from the forward)."""
    placeholders = list(bw.graph.find_nodes(op="placeholder"))
    for t in saved.tensors:
        if not 0 <= t.backward_index < len(placeholders):
            continue
        ph, p = placeholders[t.backward_index], plan.placement(t.group)
        if p.write is Write.STAGED:
            ph.meta[SLOT_META] = "read from slot: a view of a staged input"
        elif p.write is Write.OFFLOAD:
            ph.meta[SLOT_META] = (f"in the host arena, reloaded ahead of use: group "
                                  f"{t.group} at host byte {p.member_offset(t)}")
        elif p.write is not Write.NONE:
            ph.meta[SLOT_META] = f"read from slot: group {t.group} at byte {p.member_offset(t)}"


def backward_slot_args(saved: SavedSet, plan: ArenaPlan) -> tuple[int | None, list[list[int]]]:
    """Where the backward's arguments meet the slot, by position: one argument that is a slot
    view (None when none is), and the arguments of each offloaded group (in plan order)."""
    slotted = [t.backward_index for t in slot_tensors(saved, plan) if t.backward_index >= 0]
    offloaded = [[saved.tensor(m).backward_index for m in saved.groups[p.group].members]
                 for p in plan.placements if p.write is Write.OFFLOAD]
    return (min(slotted) if slotted else None), offloaded


def slot_tensors(saved: SavedSet, plan: ArenaPlan) -> list[SavedTensor]:
    """The saved tensors in the slot's arenas (device or host), not saved as they are."""
    return [t for t in saved.tensors if plan.placement(t.group).write is not Write.NONE]


def slot_outputs(saved: SavedSet, plan: ArenaPlan) -> list[int]:
    """The forward outputs (by position) that are saved tensors in the slot: the ones a
    replay hands the backward as the arena token."""
    return [t.output_index for t in slot_tensors(saved, plan) if t.output_index >= 0]


def snapshot(gm: fx.GraphModule) -> Callable[[], fx.GraphModule]:
    """A copy of ``gm``'s graph that rewriting ``gm`` leaves alone, and a function that builds
    it into a module: what runs if a pass fails half-way through. Copying the nodes is cheap;
    generating the module's code is not, so that waits for a failure (node metadata is
    shared, not copied)."""
    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    return lambda: fx.GraphModule(gm, graph)
