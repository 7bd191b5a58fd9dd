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

from typing import Any, Hashable, Mapping, Sequence

import torch
import torch.fx as fx

from .. import _torch, ops
from ..overlay import END, NEVER
from ..schemas import SLOT_META
from .deliver import SCATTER_ADDS


_COPY = torch.ops.aten.copy_.default
_SCATTERS = frozenset({*SCATTER_ADDS, torch.ops.aten.scatter_add.default})
# In-place ops that write an embedding's gradient buffer, one after the other
# (``passes/deliver.py``: zeroes, then a scatter-add). Counted as kernels Inductor generates
# (a scatter with boolean indices falls back to ATen's): a wrong guess only moves reads later.
_IN_PLACE = frozenset({"aten::fill_", "aten::index_put_"})


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
        src = _source(node) if node is not None else None
        stored = (isinstance(src, fx.Node) and src.op == "call_function"
                  and src.target not in _SCATTERS)  # a scatter's result is copied
        out.append(pos[src] if stored else w)
    return tuple(out)


def fused_reads(graph: fx.Graph, reads: Sequence[int], writes: Sequence[int]
                ) -> tuple[int, ...]:
    """``reads`` (the last read of each argument placeholder of ``graph``) with the reads that
    Inductor fuses into a gradient's producing kernel moved to that gradient's write (by
    position, ``writes``): the values its kernel computes inline (``_inline``) read their
    placeholders there, not at their own nodes. Fenced at those nodes instead, an RMSNorm
    weight's gradient lost its fusion: Inductor stored the product it sums before the fence
    (a tensor of the activation's size, rounded to bf16) and summed it in a kernel of its own
    after it. A later read only shrinks what the plan may place: safe wherever this guess
    of Inductor's fusion is wrong."""
    nodes = list(graph.nodes)
    index = {n: k for k, n in enumerate(n for n in nodes if n.op == "placeholder")}
    inline = _inline(nodes)
    out = list(reads)
    for w in writes:
        for p in (_fused_into(_writers(nodes[w]), inline) if w < len(nodes) else ()):
            if index.get(p, len(out)) < len(out):
                out[index[p]] = max(out[index[p]], w)
    return tuple(out)


def _writers(first: fx.Node) -> list[fx.Node]:
    """``first`` and the in-place ops that go on writing what it wrote (a fill's scatter): the
    fence before ``first`` comes before all of them, so their reads count there too."""
    out = [first]
    while (nxt := next((u for u in out[-1].users if _in_place(u)
                        and u.args[0] is out[-1]), None)) is not None:
        out.append(nxt)
    return out


def _fused_into(producers: list[fx.Node], inline: set[fx.Node]) -> set[fx.Node]:
    """The placeholders the kernels computing ``producers`` read through the values they
    compute inline; none for a producer Inductor does not generate."""
    found: set[fx.Node] = set()
    seen = set(producers)
    stack = [a for p in producers if _generated(p) for a in p.all_input_nodes]
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            if n.op == "placeholder":
                found.add(n)
            elif n in inline:
                stack.extend(n.all_input_nodes)
    return found


def _inline(nodes: list[fx.Node]) -> set[fx.Node]:
    """The values Inductor computes inside each kernel that uses them, by its rules: one it
    generates, whose every user it generates too (an extern kernel such as ``mm`` reads a
    stored value), and, with several users, that reads few stored values (more, and it
    stores it once: a residual gradient summed over the layers is stored; counted as inline,
    an embedding's scatter would reach back through every layer)."""
    limit, inline = _torch.inductor_reads_threshold(), set()
    reads: dict[fx.Node, frozenset[fx.Node]] = {}
    for n in nodes:  # in topological order: each argument's reads are known
        if not _generated(n):
            continue
        reads[n] = frozenset().union(*(reads[a] if a in inline else {a}
                                       for a in n.all_input_nodes))
        if all(_generated(u) for u in n.users) and (len(n.users) <= 1 or len(reads[n]) <= limit):
            inline.add(n)
    return inline


def _generated(node: fx.Node) -> bool:
    """Whether Inductor computes ``node`` in a kernel it generates, fusible with its
    neighbours: a pointwise op, a view, a reduction, a scatter (an embedding's gradient) or
    the fill before it."""
    tags = getattr(node.target, "tags", ())
    return node.op == "call_function" and (
        torch.Tag.pointwise in tags or torch.Tag.reduction in tags or node.target in _SCATTERS
        or _in_place(node) or _torch.returns_view(node.target))


def _in_place(node: fx.Node) -> bool:
    return getattr(getattr(node.target, "_schema", None), "name", None) in _IN_PLACE


def unfenced_small(graph: fx.Graph, writes: Sequence[int], nbytes: Sequence[int],
                   limit: int) -> tuple[int, ...]:
    """``writes`` with 0 (the first node, before any read) for each gradient under ``limit``
    bytes that a kernel Inductor generates writes (a bias's, a norm weight's): the plan then
    gives it only bytes no node reads, so it needs no fence, and no fence splits the kernel
    that writes it from the sums it shares. Fenced, GPT's LayerNorm bias gradient (a sum of
    the incoming gradient, in the kernel whose other sums read the saved input) was stored by
    a kernel of its own."""
    nodes = list(graph.nodes)
    return tuple(0 if w < len(nodes) and n < limit and _generated(_source(nodes[w])) else w
                 for w, n in zip(writes, nbytes, strict=True))


def _source(node: fx.Node) -> Any:
    """What a ``copy_`` copies (seen through views: a scatter's result, say); else ``node``."""
    src = node.args[1] if node.target is _COPY else node
    while isinstance(src, fx.Node) and _torch.returns_view(src.target):
        src = src.args[0]
    return src if isinstance(src, fx.Node) else node


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
