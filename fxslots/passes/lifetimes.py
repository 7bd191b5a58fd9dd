"""Lifetimes: when a delivering backward last reads each argument and first writes each
gradient buffer, by position in its node order (what ATen kernels run in).

An analysis, not a rewrite: ``fxslots.overlay.place`` turns the positions into gradient
offsets in the slot's arena. A value's readers include the readers of every value that may
share its bytes (views, in-place results, getitem; any callable without a schema); a value the
graph returns, or that shares bytes with one, is read at ``overlay.END``.
"""

from __future__ import annotations

import torch.fx as fx

from .. import _torch
from ..overlay import END, NEVER


def read_lifetimes(gm: fx.GraphModule, n_buffers: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(last read of each argument placeholder, first write of each of the ``n_buffers``
    buffer placeholders that come last)."""
    nodes = list(gm.graph.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    placeholders = [n for n in nodes if n.op == "placeholder"]
    args = placeholders[:len(placeholders) - n_buffers]
    buffers = placeholders[len(placeholders) - n_buffers:]
    writes = tuple(min((pos[u] for u in b.users), default=END) for b in buffers)
    return tuple(_last_read(p, pos) for p in args), writes


def _last_read(value: fx.Node, pos: dict[fx.Node, int]) -> int:
    last, stack, seen = NEVER, [value], {value}
    while stack:
        for user in stack.pop().users:
            if user.op == "output":
                return END
            last = max(last, pos[user] if not _reads_later(user) else _downstream(user, pos))
            if user not in seen and may_return_alias(user.target):
                seen.add(user)
                stack.append(user)
    return last


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
