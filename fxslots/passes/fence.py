"""Fence: a delivering backward under Inductor that may write its gradients into bytes of saved
tensors it has finished reading (``fxslots.overlay``), as ATen kernels do.

The plan that places gradients in the slot's arena reads the backward in node order: a gradient
first written at node ``w`` may take the bytes of a storage group last read before ``w``. ATen
kernels run in that order. Inductor's do not: it computes a pointwise value inside the kernel
that uses it, which may run after ``w``, and orders its kernels by the dependencies it sees,
which never link a saved tensor to a gradient buffer (separate inputs, to Inductor). Compiled
as it was, a backward that read a saved tensor into such a value and then wrote a gradient over
it read the gradient's bytes instead (``tests/test_fence.py``).

So this pass puts a fence (``ops.fence``) before each gradient's first write: a call that
declares written the gradient's buffer and the argument placeholders of every group that is
dead by then. Inductor then realizes each value still pending on those placeholders before
the fence, runs every kernel reading them before it, and the gradient's write (a later write
of the same buffer) after it: the node order the plan assumed, for these bytes. Each fence also
declares written one placeholder an earlier fence did, so the fences keep their order too. It
runs as Inductor's last pass over the graph it lowers, after Inductor's own rewrites, which
move reads too (``in_arena.Fencing``).

``plan_fences`` is the plan, pure data; ``fence_writes`` applies it.
"""

from __future__ import annotations

from typing import Hashable, Mapping, Sequence

import torch
import torch.fx as fx

from .. import _torch, ops
from ..overlay import END, NEVER
from ..schemas import SLOT_META


_COPY = torch.ops.aten.copy_.default


def plan_fences(writes: Sequence[int], reads: Mapping[Hashable, int],
                groups: Sequence[Hashable | None]) -> tuple[tuple[int, ...], ...]:
    """Per gradient (``writes``: the position of its first write), the argument placeholders
    its fence declares written (empty: no fence): those of each group (``groups``: per
    placeholder, None where it may not be declared) whose last read (``reads``) comes before
    that write and that no earlier fence declared, then the last placeholder an earlier fence
    declared, which chains the fences in write order. A gradient written before any group is
    dead needs none: the plan can give it only bytes no node reads."""
    fences: list[tuple[int, ...]] = [()] * len(writes)
    declared: set[int] = set()
    chain: int | None = None
    for i in sorted(range(len(writes)), key=lambda i: writes[i]):
        new = [k for k, g in enumerate(groups) if g is not None and k not in declared
               and NEVER < reads.get(g, NEVER) < writes[i] < END]
        fences[i] = tuple(new + ([chain] if chain is not None else []))
        declared.update(new)
        chain = new[-1] if new else chain
    return tuple(fences)


def computed_at(graph: fx.Graph, writes: Sequence[int]) -> tuple[int, ...]:
    """Where each gradient's write may happen in Inductor's code, by position in ``graph``
    (whose ``len(writes)`` last placeholders are the gradients' buffers; ``writes``: each
    one's first user): a ``copy_`` of a computed value is stored by the kernel that computes
    it, so its write comes at that value's producer (seen through views). Fenced at the
    ``copy_`` instead, the value read tensors the fence declared dead, and Inductor computed it
    into a buffer of its own and copied that: one more kernel and a copy of the gradient."""
    nodes = list(graph.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    out = []
    for w in writes:
        node = nodes[w] if w < len(nodes) else None
        src = node.args[1] if node is not None and node.target is _COPY else None
        while isinstance(src, fx.Node) and _torch.returns_view(src.target):
            src = src.args[0]
        out.append(pos[src] if isinstance(src, fx.Node) and src.op == "call_function" else w)
    return tuple(out)


def fence_writes(graph: fx.Graph, writes: Sequence[int], fences: Sequence[tuple[int, ...]]
                 ) -> None:
    """Put each gradient's fence (``plan_fences``) in ``graph`` (a delivering backward whose
    ``len(writes)`` last placeholders are the gradients' buffers) right before the node at its
    write position. In place: it runs as Inductor's last pass over its own copy."""
    nodes = list(graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    buffers = placeholders[len(placeholders) - len(writes):]
    for buf, w, dead in zip(buffers, writes, fences, strict=True):
        if dead:
            _fence(graph, nodes[w], buf, [placeholders[k] for k in dead])
    graph.lint()


def _fence(graph: fx.Graph, before: fx.Node, buf: fx.Node, dead: list[fx.Node]) -> None:
    with graph.inserting_before(before):
        node = graph.call_function(ops.fence, (buf, dead))
    node.meta["val"] = None
    node.meta[SLOT_META] = (f"fence: {buf.name} is written after the last read of "
                            f"{', '.join(d.name for d in dead)}")
