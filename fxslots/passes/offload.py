"""Offload scheduling: where the forward joins each device-to-host copy, and where the backward
issues each reload and joins it, from an estimate of the compute time between graph points.

Forward: ``rewrite_forward`` put ``streams.offload`` right after each offloaded group's
producer. The copies share one side stream, so they finish one after another; each group's
``offload_wait`` goes to the first node that starts once its copy should be done, planned with
``DeviceCaps.join_slack`` (the graph frees the device value at that wait), or before the
output if the forward ends first.
Backward: each offloaded group's host views are read through ``streams.reload`` (issued as late
as lets its copy, queued behind the earlier ones, finish by the first use) and
``streams.reload_wait`` right before the first use.
"""

from __future__ import annotations

import operator

import torch.fx as fx

from .. import streams
from ..costs import DeviceCaps, graph_seconds, value_bytes
from ..schemas import ArenaPlan, SavedSet, Write
from ..schemas import SLOT_META


def schedule_offload(fw: fx.GraphModule, caps: DeviceCaps) -> int:
    """Insert the forward's waits; returns how many."""
    times = _start_times(fw, caps)
    order = {n: i for i, (n, _) in enumerate(times)}
    nodes = [n for n, _ in times]
    link_free = 0.0
    copies = [n for n in nodes if n.target is streams.offload]
    for copy in copies:
        host, value = copy.args
        link_free = max(link_free, times[order[copy]][1]) + caps.join_seconds(
            value_bytes(value))
        at = next((n for n, t in times[order[copy] + 1:] if t >= link_free), nodes[-1])
        with fw.graph.inserting_before(at):
            wait = fw.graph.call_function(streams.offload_wait, (value, copy))
        wait.meta[SLOT_META] = (f"the compute stream joins the d2h copy of {value.name}: its "
                                f"device bytes are free after")
    fw.graph.lint()
    fw.recompile()
    return len(copies)


def schedule_reload(bw: fx.GraphModule, saved: SavedSet, plan: ArenaPlan,
                    caps: DeviceCaps, device) -> int:
    """Read every offloaded group of ``bw`` through a reload; returns how many."""
    placeholders = {p.name: p for p in bw.graph.find_nodes(op="placeholder")}
    times = _start_times(bw, caps)
    order = {n: i for i, (n, _) in enumerate(times)}
    groups = []
    for p in plan.placements:
        members = [placeholders[m] for m in saved.groups[p.group].members if m in placeholders]
        if p.write is Write.OFFLOAD and members:
            first = min((u for m in members for u in m.users), key=order.__getitem__)
            groups.append((first, members, max(value_bytes(m) for m in members)))
    groups.sort(key=lambda g: order[g[0]])
    deadline = float("inf")
    issue_at = []
    for first, members, nbytes in reversed(groups):  # latest first: the link is one queue
        deadline = min(deadline, times[order[first]][1]) - caps.transfer_seconds(nbytes)
        issue = max((n for n, t in times if t <= deadline and n.op != "placeholder"),
                    key=order.__getitem__, default=None)
        issue_at.append(issue)
    for (first, members, _), issue in zip(groups, reversed(issue_at), strict=True):
        if issue is None or order[issue] >= order[first]:
            issue = first if issue is not None else _first_op(bw.graph)
        _reload(bw.graph, members, first, issue, device)
    bw.graph.lint()
    bw.recompile()
    return len(groups)


def _reload(graph: fx.Graph, members: list[fx.Node], first: fx.Node, issue: fx.Node,
            device) -> None:
    with graph.inserting_before(issue):
        handle = graph.call_function(streams.reload, (device, *members))
    with graph.inserting_before(first):
        ready = graph.call_function(streams.reload_wait, (handle,))
        views = [graph.call_function(operator.getitem, (ready, i)) for i in range(len(members))]
    handle.meta[SLOT_META] = (f"reloads {', '.join(m.name for m in members)} on the h2d side "
                              f"stream")
    ready.meta[SLOT_META] = "the compute stream joins the h2d copy before its first use"
    for m, v in zip(members, views, strict=True):
        v.meta["val"] = m.meta.get("val")
        for user in list(m.users):
            if user is not handle:
                user.replace_input_with(m, v)


def _start_times(gm: fx.GraphModule, caps: DeviceCaps) -> list[tuple[fx.Node, float]]:
    """Each node with the estimated compute time before it starts."""
    out, t = [], 0.0
    for n, s in graph_seconds(gm, caps):
        out.append((n, t))
        t += s
    return out


def _first_op(graph: fx.Graph) -> fx.Node:
    return next(n for n in graph.nodes if n.op != "placeholder")
