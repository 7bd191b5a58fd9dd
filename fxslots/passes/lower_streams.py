"""Lower the side-stream copies of a graph (offload and reload) into operators Inductor keeps.

``streams.offload``/``offload_wait`` in the forward, ``streams.reload``/``reload_wait`` in the
backward become ``fxslots::offload_start``/``offload_join`` and ``fxslots::reload``/
``reload_join``: Inductor orders them by the tensors they read and write, and keeps each
(it cannot see a Python function's stream work).
"""

from __future__ import annotations

from typing import Any

import operator

import torch
import torch.fx as fx

from .. import _torch, ops, streams
from ..geometry import span_elements
from ..schemas import SLOT_META

aten = torch.ops.aten


def lower_streams(gm: fx.GraphModule) -> int:
    """Replace ``fxslots.streams``' functions in ``gm`` by operators Inductor keeps (in place);
    returns how many side-stream copies were replaced."""
    graph = gm.graph
    n = 0
    for node in list(graph.nodes):
        if node.target is streams.offload:
            _offload(graph, node)
            n += 1
        elif node.target is streams.reload:
            _reload(graph, node)
            n += 1
    graph.lint()
    gm.recompile()
    return n


def carries_copies(gm: fx.GraphModule) -> bool:
    """Whether ``gm`` (lowered) starts side-stream copies: where they are joined is fxslots'
    plan, which Inductor must then compile in order (``_torch.inductor_compile``'s
    ``keep_order``)."""
    return any(gm.graph.find_nodes(op="call_function", target=t)
               for t in (ops.offload_start, ops.reload, ops.reload_span))


def _offload(graph: fx.Graph, node: fx.Node) -> None:
    """``offload(host, value)`` -> event, joined by ``offload_wait(value, event)``."""
    host, value = node.args
    with graph.inserting_before(node):
        start = graph.call_function(ops.offload_start, (value, host))
    start.meta[SLOT_META] = node.meta.get(SLOT_META)
    for wait in list(node.users):
        with graph.inserting_before(wait):
            join = graph.call_function(ops.offload_join, (value, host))
        join.meta[SLOT_META] = _own_join(wait)
        graph.erase_node(wait)
    graph.erase_node(node)


def _reload(graph: fx.Graph, node: fx.Node) -> None:
    """``reload(device, *members)`` -> handle; ``reload_wait(handle)`` -> members, read
    through ``getitem``. Members that share bytes (a saved tensor and a view of it) become
    ``as_strided`` views of one reloaded span, so that Inductor knows they alias; where their
    geometry is symbolic, each is reloaded on its own (its bytes move once per member)."""
    device, *members = node.args
    vals = [m.meta.get("val") for m in members]
    spans = _spans(vals) if len(members) > 1 else None
    with graph.inserting_before(node):
        if spans is not None:
            gots = [graph.call_function(ops.reload_span, (list(members), device,
                                                          _length(spans)))]
            views = [graph.call_function(aten.as_strided.default, (gots[0], *g)) for g in spans]
            joins = [gots]
        else:
            gots = [graph.call_function(ops.reload, ([m], device)) for m in members]
            views = [graph.call_function(operator.getitem, (g, 0)) for g in gots]
            joins = [[v] for v in views]
    for got in gots:
        got.meta[SLOT_META] = node.meta.get(SLOT_META)
    if all(_torch.is_fake(v) for v in vals):  # the device-side views, for Inductor's passes
        _fake_reloads(gots, views, vals, spans, device)
    for ready in list(node.users):
        with graph.inserting_before(ready):
            for joined in joins:
                join = graph.call_function(ops.reload_join, (joined,))
                join.meta[SLOT_META] = _own_join(ready)
        for item in list(ready.users):
            item.replace_all_uses_with(views[item.args[1]])
            graph.erase_node(item)
        graph.erase_node(ready)
    graph.erase_node(node)


def _own_join(wait: fx.Node) -> Any:
    """A wait's note, for the join it becomes. Each copy is joined on its own here: a merged
    join that does not wait is safe only right after the one that does, an order Inductor's
    scheduler does not promise."""
    if wait.kwargs.get("wait", True):
        return wait.meta.get(SLOT_META)
    return "the compute stream joins this copy itself (under Inductor every join waits)"


def _spans(vals: list[Any]) -> list[tuple[list[int], list[int], int]] | None:
    """Each member's size, stride and offset in the span its group reloads into; None where
    any of them is symbolic (or a member has no fake value)."""
    if not all(_torch.is_fake(v) for v in vals):
        return None
    geo = [(list(v.shape), list(v.stride()), v.storage_offset()) for v in vals]
    if not all(isinstance(x, int) for size, stride, off in geo for x in (*size, *stride, off)):
        return None
    lo = min(off for *_, off in geo)
    return [(size, stride, off - lo) for size, stride, off in geo]


def _length(spans: list[tuple[list[int], list[int], int]]) -> int:
    """The elements of the span that holds members of these ``_spans``."""
    return max(off + int(span_elements(size, stride)) for size, stride, off in spans)


def _fake_reloads(gots: list[fx.Node], views: list[fx.Node], vals: list[Any],
                  spans: list[Any] | None, device: Any) -> None:
    with vals[0].fake_mode:
        if spans is not None:
            span = gots[0].meta["val"] = ops.reload_span(vals, device, _length(spans))
            for view, g in zip(views, spans, strict=True):
                view.meta["val"] = aten.as_strided.default(span, *g)
            return
        for got, view, val in zip(gots, views, vals, strict=True):
            got.meta["val"] = ops.reload([val], device)
            view.meta["val"] = got.meta["val"][0]
