"""Borrow: a delivering backward whose large temporaries are computed into views it is handed,
bytes of its slot's arena it has finished reading (``fxslots.overlay``), instead of the pool.

Under CUDA graphs the backward's temporaries (an activation's gradient, a recomputed value)
live in the graphs' pool beside the arena, which holds every saved byte through the whole
backward; eager's allocator serves them from activations it has just freed. On the heavy
benchmark model the pool's 0.16 GiB were the whole gap between fxslots' reserved memory and
eager's (H200 run 29). This pass makes a copy of the delivering backward that takes one view
per temporary after the gradients' buffers and computes each temporary into its view through
its out= kernel (``deliver._write_into``); its readers read that view. Where the views are
(and whether this graph runs at all, at a shape where some temporary finds no bytes) is the
runtime's choice, from ``overlay.Overlay.place_at``.

A temporary here is a single tensor of static shape, dense, on the graph's device, not
returned and sharing bytes with nothing returned, computed by an op with one out= argument and
at least ``MIN_BYTES`` large: smaller ones the pool serves from blocks it has anyway.
"""

from __future__ import annotations

import copy

import torch.fx as fx

from ..costs import allocated_bytes
from ..overlay import END, Temporary
from ..schemas import SLOT_META
from .deliver import _out_op, _write_into
from .lifetimes import last_read, may_return_alias

MIN_BYTES = 1 << 20


def borrowable(gm: fx.GraphModule) -> list[Temporary]:
    """The temporaries of ``gm`` that could be computed into a view, by node position, with
    the last position reading each (aliases' readers included)."""
    nodes = list(gm.graph.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    found = []
    for i, n in enumerate(nodes):
        if n.op != "call_function" or may_return_alias(n.target) or _out_op(n, None) is None:
            continue
        nbytes, last = allocated_bytes(n), last_read(n, pos)
        if nbytes < MIN_BYTES or last == END:
            continue
        v = n.meta["val"]
        found.append(Temporary(i, max(last, i), nbytes, (v.dtype, tuple(v.shape), v.stride())))
    return found


def borrow_arena(gm: fx.GraphModule, temps: list[Temporary]) -> fx.GraphModule:
    """A copy of ``gm`` that computes each of ``temps`` (positions in ``gm``) into a view
    passed after its own placeholders, in ``temps`` order."""
    graph = copy.deepcopy(gm.graph)
    twin = fx.GraphModule(gm, graph)
    nodes = list(graph.nodes)
    last = list(graph.find_nodes(op="placeholder"))[-1]
    with graph.inserting_before(last.next):
        views = [graph.placeholder(f"borrowed_{k}") for k in range(len(temps))]
    for k, (t, view) in enumerate(zip(temps, views, strict=True)):
        node = nodes[t.write]
        view.meta["val"] = node.meta["val"]
        view.meta[SLOT_META] = f"arena bytes borrowed for temporary {k} ({node.name})"
        _write_into(graph, node, _out_op(node, None), view, False)
        node.meta[SLOT_META] = f"computed into borrowed arena bytes ({node.target})"
    graph.lint()
    twin.recompile()
    return twin
