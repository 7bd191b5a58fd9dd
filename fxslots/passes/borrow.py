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

A temporary here is a single dense tensor on the graph's device (of symbolic size too, where
its strides are row-major at every shape: its bytes and view are then expressions, evaluated
per shape by ``Overlay.at``), not returned and sharing bytes with nothing returned, computed by
an op with one out= argument and at least ``MIN_BYTES`` large at the shape compiled: smaller
ones the pool serves from blocks it has anyway.

Before that, ``reinplace`` computes a pointwise op's result over the very bytes of a saved
tensor it reads last, where both have one geometry: the op reads each element before it writes
it, as an in-place op does. This reaches the temporaries that come before any saved bytes are
done with, such as the first ``gelu_backward`` of a Linear+GELU stack, which reads the last
layer's saved input and nothing else of the arena has been read yet (heavy MLP: 64 MiB, the
rest of its pool). The softmax backwards go over their saved output the same way, where this
torch's kernels allow it (``fxslots.rowwise``): a cross-entropy loss's is the first large
temporary of a language model's backward, and with the loss's gradient it sized llama-large's
pool (2 x 1000 MiB in fp32, H100 run 54b).
"""

from __future__ import annotations

import copy
from typing import Callable, Sequence

import torch
import torch.fx as fx

from .. import rowwise
from ..costs import allocated_bytes
from ..overlay import END, NEVER, InPlace, Temporary
from ..schemas import SLOT_META
from ..sizes import same_geometry, sizes_of
from .deliver import _out_op, _write_into
from .lifetimes import last_read, may_return_alias, sharing

MIN_BYTES = 1 << 20
_WHOLE = (torch.ops.aten.detach.default, torch.ops.aten.alias.default)


def borrowable(gm: fx.GraphModule) -> list[Temporary]:
    """The temporaries of ``gm`` that could be computed into a view, by node position, with
    the last position reading each (aliases' readers included)."""
    nodes = list(gm.graph.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    found = []
    for i, n in enumerate(nodes):
        if (n.op != "call_function" or may_return_alias(n.target)
                or _out_op(n, None, symbolic=True) is None):
            continue
        last = last_read(n, pos)
        if allocated_bytes(n) < MIN_BYTES or last == END:  # at shape hints
            continue
        found.append(Temporary(i, max(last, i), *sizes_of(n.meta["val"])))
    return found


def borrow_arena(gm: fx.GraphModule, temps: list[Temporary]) -> fx.GraphModule:
    """A copy of ``gm`` that computes each of ``temps`` (positions in ``gm``) into a view
    passed after its own placeholders, in ``temps`` order."""
    def rewrite(graph: fx.Graph, nodes: list[fx.Node]) -> None:
        last = list(graph.find_nodes(op="placeholder"))[-1]
        with graph.inserting_before(last.next):
            views = [graph.placeholder(f"borrowed_{k}") for k in range(len(temps))]
        for k, (t, view) in enumerate(zip(temps, views, strict=True)):
            node = nodes[t.write]
            view.meta["val"] = node.meta["val"]
            view.meta[SLOT_META] = f"arena bytes borrowed for temporary {k} ({node.name})"
            _write_into(graph, node, _out_op(node, None, symbolic=True), view, False)
            node.meta[SLOT_META] = f"computed into borrowed arena bytes ({node.target})"

    return _twin(gm, rewrite)


def reinplaceable(gm: fx.GraphModule, groups: Sequence[int | None]) -> list[InPlace]:
    """The pointwise (and ``rowwise.ROWWISE``) ops of ``gm`` that can compute their result
    over a saved tensor they read: argument placeholder ``k`` (``groups[k]``: its storage
    group in the arena, None where it has no bytes there), read directly or through a
    ``detach``, of the result's dtype, shape and stride, whose group nothing reads after that
    op and no other argument of the op shares bytes with; a result the graph returns never
    does (the slot's bytes are the next forward's). One result per group, of ``MIN_BYTES`` or
    more, as for borrowing."""
    nodes = list(gm.graph.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    args = [n for n in nodes if n.op == "placeholder"][:len(groups)]
    group_of = {ph: g for ph, g in zip(args, groups, strict=True) if g is not None}
    done: dict[int, int] = {}
    for ph, g in group_of.items():
        done[g] = max(done.get(g, NEVER), last_read(ph, pos))
    found, taken = [], set()
    for i, n in enumerate(nodes):
        if (n.op != "call_function" or may_return_alias(n.target)  # the kernel check last
                or allocated_bytes(n) < MIN_BYTES or _out_op(n, None, symbolic=True) is None
                or not _over_input(n)):
            continue
        read = last_read(n, pos)
        if read == END:
            continue
        for x in dict.fromkeys(x for x in n.args if isinstance(x, fx.Node)):
            a = _whole_of(x)
            g = group_of.get(a)
            if g is None or g in taken or done[g] != i or not same_geometry(
                    x.meta.get("val"), n.meta.get("val")):
                continue
            near = sharing(a) | {ph for ph, h in group_of.items() if h == g}
            if any(b in near and b is not x for b in n.all_input_nodes):
                continue
            found.append(InPlace(i, args.index(a), g, sizes_of(n.meta["val"])[0], read))
            taken.add(g)
            break
    return found


def reinplace(gm: fx.GraphModule, picks: list[InPlace]) -> fx.GraphModule:
    """A copy of ``gm`` in which each of ``picks`` computes its result into its saved input."""
    def rewrite(graph: fx.Graph, nodes: list[fx.Node]) -> None:
        args = [n for n in nodes if n.op == "placeholder"]
        for p in picks:
            node, into = nodes[p.write], args[p.arg]
            _write_into(graph, node, _out_op(node, None, symbolic=True), into, False)
            node.meta[SLOT_META] = (f"computed over the saved bytes of {into.name} "
                                    f"(g{p.group}), read last here ({node.target})")

    return _twin(gm, rewrite)


def _twin(gm: fx.GraphModule, rewrite: Callable[[fx.Graph, list[fx.Node]], None]
          ) -> fx.GraphModule:
    """A copy of ``gm`` that ``rewrite`` changed, given the copy's graph and its nodes in the
    order of ``gm``'s (what positions index)."""
    graph = copy.deepcopy(gm.graph)
    twin = fx.GraphModule(gm, graph)
    rewrite(graph, list(graph.nodes))
    graph.lint()
    twin.recompile()
    return twin


def _whole_of(x: fx.Node) -> fx.Node:
    """The node ``x`` is all of, through ``detach`` and ``alias`` (AOTAutograd's backward
    reads a saved log-softmax through a ``detach``): same bytes, same geometry."""
    while x.op == "call_function" and x.target in _WHOLE:
        x = x.args[0]
    return x


def _over_input(n: fx.Node) -> bool:
    """Whether ``n``'s kernel may write its result over an input of the result's geometry:
    a pointwise op, or one of ``rowwise.ROWWISE`` over the last dimension of a dense result
    where this torch's kernel gives the same bits there."""
    if torch.Tag.pointwise in getattr(n.target, "tags", ()):
        return True
    v = n.meta.get("val")
    if n.target not in rowwise.ROWWISE or not isinstance(v, torch.Tensor):
        return False
    return rowwise.along_rows(n.target, v, n.kwargs["dim"] if "dim" in n.kwargs else n.args[2])
