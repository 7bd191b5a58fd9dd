"""Offload scheduling: where the forward joins each device-to-host copy, and where the backward
issues each reload and joins it, from an estimate of the compute time between graph points and
a window of device bytes the transfers may hold.

Forward: ``rewrite_forward`` put ``streams.offload`` right after each offloaded group's
producer. The copies share one side stream, so they finish one after another, and one wait
on a copy joins every copy before it. Each group's ``offload_wait`` goes to the first node
that starts once its copy should be done (planned with ``DeviceCaps.join_slack``; the graph
frees the device value at that wait), or before the output if the forward ends first; copies
done within ``DeviceCaps.join_every`` of each other share the last one's node and its wait,
the others saying ``wait=False`` (a join costs the compute stream 1-1.7 us on an H200 even
when its copy is long done). A value waiting for its copy is a graph temporary the pool
holds: where the link is slower than compute (offload="all"), every value would wait to the
end of the forward and the pool would hold them all, so a copy that would take the values in
flight past the window first joins the oldest ones, stalling compute for the link.
Backward: each offloaded group's host views are read through ``streams.reload``, issued as late
as lets its copy, queued behind the earlier ones, finish by the first use, but never while the
reloaded groups still read would leave no room for it in the window (else a slow link issues
every reload at the start and the backward holds them all), and ``streams.reload_wait`` right
before the first use, or, for groups first read within ``join_every`` of each other, all at
the first of those reads, the last reload's wait first (issued early enough to be done).

``plan_joins`` and ``plan_reloads`` decide on plain numbers; ``schedule_offload`` and
``schedule_reload`` apply their positions to a graph.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import operator

from typing import Any

import torch.fx as fx

from .. import streams
from ..costs import DeviceCaps, graph_seconds, value_bytes
from ..offloading import offload_window
from ..printing import mib
from ..schemas import ArenaPlan, SavedSet, Transfers, Write
from ..schemas import SLOT_META


def plan_joins(seconds: list[float], copies: list[tuple[int, int]], caps: DeviceCaps,
               window: int) -> Transfers:
    """The node each copy is joined before, for nodes taking ``seconds`` each and copies
    ``(copy node position, bytes)`` in order (the last position is the output's). Copies done
    within ``caps.join_every`` of the first share one join, where the last was done; they
    count in the window until then, and a copy with no room beside them joins them first."""
    t = link = since = 0.0  # the compute stream's clock (stalls included), the link's
    pending: collections.deque[tuple[int, float, int]] = collections.deque()
    ready: list[tuple[int, int]] = []  # done, not joined yet: one wait will join them
    at, held, in_flight, k, last = [len(seconds) - 1] * len(copies), [], 0, 0, 0

    def join_ready() -> int:
        for c, _ in ready:
            at[c] = last
        freed = sum(b for _, b in ready)
        ready.clear()
        return freed

    for i, s in enumerate(seconds):
        if ready and t - since > caps.join_every:
            in_flight -= join_ready()
        while pending and pending[0][1] <= t:  # done by now: joining costs nothing
            c, _, nbytes = pending.popleft()
            since, last = since if ready else t, i
            ready.append((c, nbytes))
        while k < len(copies) and copies[k][0] == i:
            nbytes = copies[k][1]
            if ready and in_flight + nbytes > window:
                in_flight -= join_ready()
            while pending and in_flight + nbytes > window:
                c, done, old = pending.popleft()
                at[c], in_flight, t = i, in_flight - old, max(t, done)
                held.append(c)
            link = max(link, t) + caps.join_seconds(nbytes)
            pending.append((k, link, nbytes))
            in_flight, k = in_flight + nbytes, k + 1
        t += s
    join_ready()
    return Transfers(tuple(at), window, tuple(sorted(held)))


def runs(times: list[float], every: float) -> list[range]:
    """Indexes of ascending ``times`` in runs, each from its first through the last within
    ``every`` of it. One wait joins a run's transfers."""
    out, k = [], 0
    while k < len(times):
        j = k
        while j + 1 < len(times) and times[j + 1] - times[k] <= every:
            j += 1
        out.append(range(k, j + 1))
        k = j + 1
    return out


def plan_reloads(seconds: list[float], groups: list[tuple[int, int, int]], caps: DeviceCaps,
                 window: int, first_op: int = 0) -> Transfers:
    """For nodes taking ``seconds`` each and groups ``(first use, last use, bytes)`` sorted by
    first use: the node each reload is issued before, no earlier than ``first_op``, and the
    node it is joined before (``joined``: its run's first use, see ``runs``), by which time
    its copy is planned to be done."""
    starts = [0.0]
    for s in seconds:
        starts.append(starts[-1] + s)
    # reloads first read within ``join_every`` of each other are joined together, at the
    # earliest first read: from here on a group's "first" is where it is joined
    joined = [groups[run[0]][0] for run in runs([starts[g[0]] for g in groups], caps.join_every)
              for _ in run]
    groups = [(j, last, nbytes) for j, (_, last, nbytes) in zip(joined, groups, strict=True)]
    latest, deadline = [], float("inf")
    for first, _, nbytes in reversed(groups):  # latest first: the link is one queue
        deadline = min(deadline, starts[first]) - caps.transfer_seconds(nbytes)
        # the last node before the first use that starts by the deadline (starts ascend)
        latest.append(max(first_op, min(bisect.bisect_right(starts, deadline), first) - 1))
    at: list[int] = []
    held = []
    for g, ((first, _, nbytes), late) in enumerate(zip(groups, reversed(latest), strict=True)):
        p = max(late, at[-1] if at else first_op)
        while p < first:  # the reloads issued before and still read at p
            live = [(last, b) for (_, last, b), issued in zip(groups[:g], at, strict=True)
                    if issued <= p <= last]
            if not live or sum(b for _, b in live) + nbytes <= window:
                break  # room, or a group larger than the window goes alone
            p = min(min(last for last, _ in live) + 1, first)
        if p > late:
            held.append(g)
        at.append(p)
    return Transfers(tuple(at), window, tuple(held), tuple(joined))


def schedule_offload(fw: fx.GraphModule, caps: DeviceCaps, window: Any = "auto") -> Transfers:
    """Insert the forward's waits; ``window`` as ``options.offload_window`` takes it."""
    nodes, seconds = _timed(fw, caps)
    copies = [(i, n) for i, n in enumerate(nodes) if n.target is streams.offload]
    sizes = [value_bytes(n.args[1]) for _, n in copies]
    window = offload_window(window, sizes)
    plan = plan_joins(seconds, [(i, b) for (i, _), b in zip(copies, sizes, strict=True)], caps,
                      window)
    held, last = set(plan.held), {at: c for c, at in enumerate(plan.at)}
    # at each join the last copy's wait goes first: it joins the copies before it too
    for c in sorted(range(len(copies)), key=lambda c: (plan.at[c], -c)):
        copy, at = copies[c][1], plan.at[c]
        value, real = copy.args[1], copies[last[at]][1].args[1]
        with fw.graph.inserting_before(nodes[at]):
            wait = fw.graph.call_function(streams.offload_wait, (value, copy),
                                          {} if value is real else {"wait": False})
        wait.meta[SLOT_META] = (
            (f"the compute stream joins the d2h copy of {value.name}" if value is real else
             f"joined by the wait for {real.name}'s copy (copies end in order)")
            + ": its device bytes are free after" + (
                f" (joined early: the copies in flight would hold more than the "
                f"{mib(window)} window)" if c in held else ""))
    fw.graph.lint()
    fw.recompile()
    return plan


def schedule_reload(bw: fx.GraphModule, saved: SavedSet, plan: ArenaPlan,
                    caps: DeviceCaps, device, window: Any = "auto") -> Transfers:
    """Read every offloaded group of ``bw`` through a reload; ``window`` as
    ``options.offload_window`` takes it (the forward's rule, over the same groups)."""
    placeholders = {p.name: p for p in bw.graph.find_nodes(op="placeholder")}
    nodes, seconds = _timed(bw, caps)
    order = {n: i for i, n in enumerate(nodes)}
    groups = []
    for p in plan.placements:
        members = [placeholders[m] for m in saved.groups[p.group].members if m in placeholders]
        if p.write is Write.OFFLOAD and members:
            uses = [order[u] for m in members for u in m.users]
            groups.append((min(uses), max(uses), max(value_bytes(m) for m in members), members))
    groups.sort(key=lambda g: g[0])
    first_op = next(i for i, n in enumerate(nodes) if n.op != "placeholder")
    window = offload_window(window, [g[2] for g in groups])
    issues = plan_reloads(seconds, [g[:3] for g in groups], caps, window, first_op)
    for joined, run in itertools.groupby(range(len(groups)), key=lambda g: issues.joined[g]):
        run = list(run)
        handles = {g: _reload(bw.graph, groups[g][3], nodes[issues.at[g]], device) for g in run}
        last = run[-1]
        for g in [last, *run[:-1]]:  # the last reload's wait joins the run's
            _join(bw.graph, groups[g][3], handles[g], nodes[joined],
                  None if g == last else handles[last])
    bw.graph.lint()
    bw.recompile()
    return issues


def _reload(graph: fx.Graph, members: list[fx.Node], issue: fx.Node, device) -> fx.Node:
    with graph.inserting_before(issue):
        handle = graph.call_function(streams.reload, (device, *members))
    handle.meta[SLOT_META] = (f"reloads {', '.join(m.name for m in members)} on the h2d side "
                              f"stream")
    return handle


def _join(graph: fx.Graph, members: list[fx.Node], handle: fx.Node, first: fx.Node,
          by: fx.Node | None) -> None:
    """Hand the reloaded ``members`` to their readers before ``first``: joined here, or by the
    wait for the later reload ``by`` just before."""
    with graph.inserting_before(first):
        ready = graph.call_function(streams.reload_wait, (handle,),
                                    {} if by is None else {"wait": False})
        views = [graph.call_function(operator.getitem, (ready, i)) for i in range(len(members))]
    ready.meta[SLOT_META] = ("the compute stream joins the h2d copy before its first use"
                             if by is None else
                             f"joined by the wait for {by.name} (copies end in order)")
    for m, v in zip(members, views, strict=True):
        v.meta["val"] = m.meta.get("val")
        for user in list(m.users):
            if user is not handle:
                user.replace_input_with(m, v)


def _timed(gm: fx.GraphModule, caps: DeviceCaps) -> tuple[list[fx.Node], list[float]]:
    pairs = graph_seconds(gm, caps)
    return [n for n, _ in pairs], [s for _, s in pairs]
