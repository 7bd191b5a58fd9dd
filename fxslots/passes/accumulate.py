"""Accumulate: a backward graph that adds parameter gradients into the ``.grad`` buffers itself.

With persistent ``.grad`` buffers (gradient accumulation, ``zero_grad(set_to_none=False)``),
autograd adds every returned gradient into its buffer with one launch per parameter, outside any
captured graph. This pass makes a copy of the backward graph that takes those buffers as extra
placeholders (appended last, in ``outputs`` order), adds into them with one multi-tensor
``_foreach_add_``, and returns None in their place, so autograd has nothing left to do.

Uncaptured, one add at the end, not one after each gradient's producer: a backward that raises
part-way (an out-of-memory a training loop catches and skips) then adds nothing, as aot_eager's,
which hands autograd its gradients only when it returns. The price: every gradient lives in the
graph's memory at the end of the backward (llama-small under CUDA graphs: a 0.25 GiB pool where
the sequential schedule's is 0.10, H200 run 23a). A replay of a captured graph cannot stop
part-way, so the graph captured adds in groups instead (``flush_bytes``): once the gradients
computed and not yet added reach that many bytes, one ``_foreach_add_`` adds them, and their
memory serves the rest of the backward. The adds are the same elementwise adds either way.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.fx as fx

from .. import _torch
from ..costs import value_bytes
from ..geometry import grad_strides
from ..schemas import SLOT_META

aten = torch.ops.aten


def twin_with_buffers(bw: fx.GraphModule, outputs: list[int], prefix: str
                      ) -> tuple[fx.GraphModule, fx.Node, list, list[fx.Node]]:
    """A copy of ``bw`` with one placeholder ``<prefix>_<i>`` per output ``i`` in ``outputs``,
    after its own: the copy, its output node, its outputs (a list to edit) and the buffers."""
    gm = fx.GraphModule(bw, copy.deepcopy(bw.graph))
    graph = gm.graph
    output = next(iter(graph.find_nodes(op="output")))
    last = list(graph.find_nodes(op="placeholder"))[-1]
    with graph.inserting_before(last.next):
        buffers = [graph.placeholder(f"{prefix}_{i}") for i in outputs]
    return gm, output, list(output.args[0]), buffers


FLUSH_FLOOR = 8 * 2**20


def flush_bytes_for(total: int) -> int:
    """Gradient bytes a captured accumulating backward holds before adding them: a sixteenth of
    all (at most about 16 multi-tensor adds), at least 8 MiB (adds of fewer bytes cost more in
    launches than they save)."""
    return max(total // 16, FLUSH_FLOOR)


def accumulate_grads(bw: fx.GraphModule, outputs: list[int], flush_bytes: int | None = None,
                     fuse: bool = False, params: list[Any] | None = None) -> fx.GraphModule:
    """A new backward graph that adds its outputs at ``outputs`` into buffers passed last: at
    the end, or (``flush_bytes``) in groups as they are computed; with ``fuse`` (captured
    only), a gradient that is a matrix product is added by the product itself (``_fuse``).
    ``params``: the parameters' (fake) values, one per output, whose layout the buffers have."""
    gm, output, outs, buffers = twin_with_buffers(bw, outputs, "grad")
    graph = gm.graph
    for b, i, p in zip(buffers, outputs, params or [None] * len(outputs), strict=True):
        b.meta["val"] = _buffer_value(outs[i].meta.get("val"), p)
        b.meta[SLOT_META] = f"the .grad buffer of output {i}, added into in the graph"
    pairs = [(b, outs[i]) for b, i in zip(buffers, outputs, strict=True)]
    fusing = fuse and flush_bytes is not None
    if fusing:
        pairs = _fuse(graph, pairs, outs)
    groups = [(output, pairs)] if flush_bytes is None else _groups(graph, pairs, flush_bytes)
    for at, group in groups:
        with (graph.inserting_before(at) if at is output else graph.inserting_after(at)):
            _add_group(graph, group, one_each=flush_bytes is not None)
    for i in outputs:
        outs[i] = None
    output.args = (tuple(outs),)
    if fusing:
        _erase_unused(graph)
    graph.lint()
    gm.recompile()
    return gm


def _buffer_value(grad: Any, param: Any) -> Any:
    """A ``.grad`` buffer's fake value: the gradient's, in the strides of the parameter's
    layout contract (``geometry.grad_strides``), which autograd keeps its ``.grad`` in and the
    runtime checks; the gradient itself may have others (a convolution's weight gradient for a
    channels_last input is channels_last)."""
    if not (_torch.is_fake(grad) and isinstance(param, torch.Tensor)) or param.shape != grad.shape:
        return grad
    with grad.fake_mode:
        return torch.empty_strided(grad.shape, grad_strides(param), dtype=grad.dtype,
                                   device=grad.device)


_TRANSPOSES = (aten.t.default, aten.permute.default, aten.transpose.int)


def _fuse(graph: fx.Graph, pairs: list[tuple[fx.Node, fx.Node]], outs: list
          ) -> list[tuple[fx.Node, fx.Node]]:
    """Replace each gradient that is ``mm(a, b)`` (seen through 2-D transposes, nothing else
    reading it on the way) by ``addmm_(buffer, a, b)`` where the mm was: the GEMM adds into
    ``.grad`` as it writes (beta=1), so the gradient is never written out and read back by an
    add (on a weight gradient, two of the three passes over its bytes the add costs). One
    rounding of the sum instead of two: not bitwise eager's. Only a captured graph's: it adds
    as it goes, and a replay cannot stop part-way. The pairs left to add."""
    left = []
    for b, g in pairs:
        found = _product(g) if sum(o is g for o in outs) == 1 else None
        if found is None:
            left.append((b, g))
            continue
        mm, flipped = found
        a, m = mm.args
        if flipped:  # b = (a @ m)^T = m^T @ a^T
            with graph.inserting_before(mm):
                a, m = (graph.call_function(aten.t.default, (m,)),
                        graph.call_function(aten.t.default, (a,)))
        with graph.inserting_before(mm):
            add = graph.call_function(aten.addmm_.default, (b, a, m))
        add.meta["val"] = b.meta.get("val")  # in place: the buffer
        add.meta[SLOT_META] = "a matrix product added into its .grad buffer by the GEMM"
    return left


def _product(g: fx.Node) -> tuple[fx.Node, bool] | None:
    """``(mm, flipped)``: ``g`` is ``mm`` or its transpose (``flipped``), through 2-D transposes
    that nothing else reads; None where it is not."""
    flipped, n = False, g
    while n.op == "call_function" and n.target in _TRANSPOSES:
        if not _swaps_two_dims(n) or len(n.users) != 1:
            return None
        flipped, n = not flipped, n.args[0]
    if n.op != "call_function" or n.target is not aten.mm.default or len(n.users) != 1:
        return None
    val = g.meta.get("val")
    return (n, flipped) if isinstance(val, torch.Tensor) and val.dim() == 2 else None


def _swaps_two_dims(n: fx.Node) -> bool:
    val = n.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dim() != 2:
        return False
    if n.target is aten.permute.default:
        return list(n.args[1]) == [1, 0]
    if n.target is aten.transpose.int:
        return {d % 2 for d in n.args[1:3]} == {0, 1}
    return True


def _erase_unused(graph: fx.Graph) -> None:
    """Drop the products and transposes whose gradient ``_fuse`` replaced (pure ops nothing
    reads any more), last first."""
    for n in reversed(list(graph.nodes)):
        if (n.op == "call_function" and not n.users
                and n.target in (*_TRANSPOSES, aten.mm.default)):
            graph.erase_node(n)


# A gradient this large fills the GPU by itself: added alone (an elementwise add_), not in a
# multi-tensor add, whose launches hold at most 320 blocks and ran the heavy MLP's 32 MiB
# gradients at 0.77x the elementwise add's bandwidth (H200 run 24a: 710 us a 1F1B step against
# eager's 550).
ALONE_BYTES = 2**20


def _add_group(graph: fx.Graph, group: list[tuple[fx.Node, fx.Node]], one_each: bool) -> None:
    """Add a group's gradients into their buffers: one multi-tensor add; captured
    (``one_each``), an add_ of its own for each gradient of ``ALONE_BYTES`` or more (inside a
    graph a launch costs nothing; the numerics are the same elementwise adds)."""
    big = [one_each and value_bytes(g) >= ALONE_BYTES for _, g in group]
    alone = [p for p, b in zip(group, big, strict=True) if b]
    rest = [p for p, b in zip(group, big, strict=True) if not b]
    for b, g in alone:
        add = graph.call_function(aten.add_.Tensor, (b, g))
        add.meta[SLOT_META] = "accumulates a gradient into its .grad buffer"
    if rest:
        add = graph.call_function(aten._foreach_add_.List, ([b for b, _ in rest],
                                                            [g for _, g in rest]))
        add.meta[SLOT_META] = f"accumulates {len(rest)} gradients into their .grad buffers"


def _groups(graph: fx.Graph, pairs: list[tuple[fx.Node, fx.Node]], flush_bytes: int
            ) -> list[tuple[fx.Node, list]]:
    """``(node to add after, (buffer, gradient) pairs)``: gradients in the order the graph
    computes them, cut where those not yet added reach ``flush_bytes``; the last group after
    the last gradient."""
    nodes = list(graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    last_input = max(order[p] for p in graph.find_nodes(op="placeholder"))

    def ready(g: fx.Node) -> int:  # where a gradient exists: an input's at once
        return last_input if g.op == "placeholder" else order[g]

    groups, pending, held = [], [], 0
    ordered = sorted(pairs, key=lambda p: ready(p[1]))
    for k, (b, g) in enumerate(ordered):
        pending.append((b, g))
        held += value_bytes(g)
        at = ready(g)
        if k + 1 == len(ordered) or (held >= flush_bytes and ready(ordered[k + 1][1]) > at):
            groups.append((nodes[at], pending))
            pending, held = [], 0
    return groups
