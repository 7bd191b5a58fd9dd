"""Analysis: reads at absolute storage offsets, which a slot would send to other bytes.

``as_strided`` and its kin (any op with a ``storage_offset`` argument) count that offset from
the first element of their input's *storage*, not from the input. AOTAutograd emits them for
inputs that alias each other when the graph mutates one (a "synthetic base":
``as_strided(primals_1, [2, 8], [8, 1], 8)`` rebuilds ``t[1:3]`` from ``t``), and some
decompositions of view ops do too. A slot moves the bytes it holds: a saved group sits at its
place in the arena, a staged input or tangent after the saved groups. Such a read would then
land on other bytes of the arena, another tensor's, and the graph would compute garbage without
a sound. So a saved group a node reads that way falls back (no slots; ``PassError``), and an
input or tangent read that way is never staged: the graph runs without CUDA graphs, with its
slots (the reasons returned, which ``capturable`` reports).
"""

from __future__ import annotations

import functools
from typing import Any, Iterator

import torch
import torch.fx as fx

from .. import _torch
from ..errors import PassError
from ..schemas import Source, StorageGroup


def unstageable_reads(fw: fx.GraphModule, bw: fx.GraphModule, fw_groups: dict[Any, StorageGroup],
                      bw_saved: dict[int, StorageGroup], static: set[int]) -> tuple[str, ...]:
    """Why a CUDA graph of this pair cannot stage its inputs: one line per node that reads a
    non-static input (or, in ``bw``, a saved view of one, or a tangent) at absolute storage
    offsets. Raises ``PassError`` where the node reads a group the plan would put in a slot.
    ``fw_groups``: the saved groups by storage key of the forward's values; ``bw_saved``: the
    group of each backward placeholder that is a saved tensor, by placeholder index."""
    inputs = {_torch.storage_key(v): p.name for i, p in enumerate(_placeholders(fw))
              if i not in static and (v := _val(p)) is not None}
    found = [_check(n, p, fw_groups.get(key), inputs.get(key)) for n, p, key in _reads(fw)]
    bw_keys, tangents = {}, {}
    for i, p in enumerate(_placeholders(bw)):
        if (v := _val(p)) is not None:
            if i in bw_saved:
                bw_keys[_torch.storage_key(v)] = bw_saved[i]
            else:
                tangents[_torch.storage_key(v)] = p.name
    found += [_check(n, p, bw_keys.get(key), tangents.get(key)) for n, p, key in _reads(bw)]
    return tuple(why for why in found if why is not None)


def _check(n: fx.Node, read: fx.Node, group: StorageGroup | None, staged: str | None) -> str | None:
    how = f"reads {read.name} at absolute storage offsets ({n.target}"
    if group is not None and group.source is Source.INTERMEDIATE:
        raise PassError(n.name, f"{how}, counted from the start of its storage): in a slot "
                                f"its bytes sit elsewhere in the arena")
    if staged is None and (group is None or group.source is not Source.INPUT):
        return None
    return (f"node {n.name} {how}: AOTAutograd's synthetic base when inputs that alias each "
            f"other are mutated); a CUDA graph stages that input into the slot, where the read "
            f"would land on other bytes. Pass inputs that do not alias each other to capture it")


def _reads(gm: fx.GraphModule) -> Iterator[tuple[fx.Node, fx.Node, Any]]:
    for n in gm.graph.nodes:
        if (n.op == "call_function" and isinstance(n.target, _torch.OpOverload)
                and _given_offset(n) is not None and n.args
                and isinstance(n.args[0], fx.Node) and (v := _val(n.args[0])) is not None):
            yield n, n.args[0], _torch.storage_key(v)


def _given_offset(n: fx.Node) -> Any:
    """The storage offset ``n`` passes, or None: none given keeps the input's own (a read
    relative to the input), and ``as_strided_scatter`` counts it in a clone of its input."""
    at = _offset_position(n.target)
    if at is None:
        return None
    return n.args[at] if len(n.args) > at else n.kwargs.get("storage_offset")


@functools.cache
def _offset_position(op: Any) -> int | None:
    if op.overloadpacket is torch.ops.aten.as_strided_scatter:
        return None
    names = [a.name for a in _torch.op_schema(op).arguments]
    return names.index("storage_offset") if "storage_offset" in names else None


def _placeholders(gm: fx.GraphModule) -> list[fx.Node]:
    return list(gm.graph.find_nodes(op="placeholder"))


def _val(n: fx.Node) -> torch.Tensor | None:
    v = n.meta.get("val")
    return v if isinstance(v, torch.Tensor) else None
