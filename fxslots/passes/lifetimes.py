"""Lifetimes: when a delivering backward last reads each argument and first writes each
gradient buffer, by position in its node order (what ATen kernels run in); and how many bytes
a graph's own allocations hold at once when it runs uncaptured.

An analysis, not a rewrite: ``fxslots.overlay.place`` turns the positions into gradient
and temporary offsets in the slot's arena. A value's readers include the readers of every value
that may share its bytes: a view of it (``_unsafe_view`` and getitem included), the result of
an op whose schema aliases that result to the argument the value is passed as (an in-place
op's or an out= op's result is the tensor it wrote: ``copy_(buf, x)`` and
``mm.out(x, w, out=buf)`` return ``buf``, not ``x``), and of any callable without a schema.
A value the graph returns, or that shares bytes with one, is read at ``overlay.END``.

Following every result a schema lets alias *some* input (the rule before session 15) kept any
value a weight gradient's ``mm.out`` reads alive to the end, since that ``mm`` returns the
gradient's buffer: no activation a weight gradient reads could lend its bytes.
"""

from __future__ import annotations

import collections
from typing import Mapping

import torch.fx as fx

from .. import _torch
from ..overlay import END, NEVER
from ..sizes import bytes_at


def read_lifetimes(gm: fx.GraphModule | fx.Graph, n_buffers: int
                   ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(last read of each argument placeholder, first write of each of the ``n_buffers``
    buffer placeholders that come last)."""
    nodes = list(gm.graph.nodes if isinstance(gm, fx.GraphModule) else gm.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    placeholders = [n for n in nodes if n.op == "placeholder"]
    args = placeholders[:len(placeholders) - n_buffers]
    buffers = placeholders[len(placeholders) - n_buffers:]
    writes = tuple(min((pos[u] for u in b.users), default=END) for b in buffers)
    return tuple(last_read(p, pos) for p in args), writes


def allocated_peak(gm: fx.GraphModule, values: Mapping[str, int] | None = None
                   ) -> tuple[int, int]:
    """(the most bytes ``gm``'s own allocations hold at once, the bytes they still hold when it
    returns), running its nodes in order at shape hints (or at ``values``, symbol name ->
    value), as an uncaptured run does: a value
    allocates at its node and is freed after its last reader (readers of its aliases count); a
    value that may share bytes with an input (a view, an out= or in-place result, getitem)
    allocates nothing. The inputs' bytes are not counted."""
    nodes = list(gm.graph.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    freed: dict[int, int] = collections.defaultdict(int)
    live = peak = held = 0
    for i, n in enumerate(nodes):
        nbytes = 0 if n.op != "call_function" or may_return_alias(n.target) else (
            bytes_at(n, values))
        if nbytes:
            live += nbytes
            last = last_read(n, pos)
            if last == END:
                held += nbytes
            else:
                freed[max(last, i)] += nbytes
        peak = max(peak, live)
        live -= freed.pop(i, 0)
    return peak, held


def last_read(value: fx.Node, pos: dict[fx.Node, int]) -> int:
    """The last position reading ``value``'s bytes (END: returned), the readers of results
    that may share them included (``sharing``)."""
    last = NEVER
    for v in (value, *sharing(value)):
        for user in v.users:
            if user.op == "output":
                return END
            last = max(last, pos[user] if not _reads_later(user) else _downstream(user, pos))
    return last


def sharing(value: fx.Node) -> set[fx.Node]:
    """The nodes whose results may share ``value``'s bytes (``_shares``, transitively)."""
    seen, stack = set(), [value]
    while stack:
        v = stack.pop()
        for user in v.users:
            if user not in seen and user.op != "output" and _shares(user, v):
                seen.add(user)
                stack.append(user)
    return seen


def _shares(user: fx.Node, arg: fx.Node) -> bool:
    """Whether ``user``'s result may share bytes with ``arg``: a view of it, or an alias its
    schema names (``_aliases``)."""
    return _torch.returns_view(user.target) or _aliases(user, arg)


def _aliases(user: fx.Node, arg: fx.Node) -> bool:
    """Whether ``user``'s result may share bytes with ``arg``, by its schema: a return's alias
    set names the argument ``arg`` is passed as (no schema: it may)."""
    schema = getattr(user.target, "_schema", None)
    if schema is None:
        return True
    sets = {a for r in schema.returns if r.alias_info is not None for a in r.alias_info.before_set}
    if any("*" in a for a in sets):  # a wildcard return may alias anything
        return True
    positional = [a for a in schema.arguments if not a.kwarg_only]
    given = [(a, user.args[i] if i < len(user.args) else user.kwargs.get(a.name))
             for i, a in enumerate(positional)]
    given += [(a, user.kwargs.get(a.name)) for a in schema.arguments if a.kwarg_only]
    return any(v is arg and a.alias_info is not None and set(a.alias_info.before_set) & sets
               for a, v in given)


def _reads_later(node: fx.Node) -> bool:
    """A functional collective launches on another stream and reads its inputs there until
    its ``wait_tensor``, which takes only its output."""
    return isinstance(node.target, _torch.OpOverload) and "c10d_functional" in node.target.name()


def _downstream(node: fx.Node, pos: dict[fx.Node, int]) -> int:
    """The last position of ``node`` and everything that uses its result (END if returned)."""
    last, stack, seen = pos[node], [node], {node}
    while stack:
        for user in stack.pop().users:
            if user.op == "output":
                return END
            if user not in seen:
                seen.add(user)
                last = max(last, pos[user])
                stack.append(user)
    return last


def may_return_alias(target) -> bool:
    """Whether a node's result may share bytes with an input: a view, an in-place op's result,
    getitem; and any callable without a schema (nothing says it does not)."""
    schema = getattr(target, "_schema", None)
    return schema is None or _torch.returns_view(target) or any(
        r.alias_info is not None for r in schema.returns)
