"""Analysis: list every saved-tensor edge of a partitioned forward/backward pair.

Reads FakeTensor metadata only; changes nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import sympy
import torch
import torch.fx as fx

from .. import _torch
from ..schemas import Root, SavedSet, SavedTensor, Source, StorageGroup, expr


def collect_saved(
    fw: fx.GraphModule,
    bw: fx.GraphModule,
    num_fwd_outputs: int,
    static_input_indices: Sequence[int],
) -> SavedSet:
    """The saved tensors of ``fw`` (outputs past the first ``num_fwd_outputs`` that ``bw`` reads),
    grouped by the storage they view."""
    outputs = _outputs(fw)
    saved_nodes = [n for n in outputs[num_fwd_outputs:] if _tensor_val(n) is not None]
    _check_backward_reads(bw, saved_nodes)

    producers = _storage_producers(fw)
    sources = _placeholder_sources(fw, static_input_indices)
    user_visible = {_torch.storage_key(v) for n in outputs[:num_fwd_outputs]
                    if (v := _tensor_val(n)) is not None}

    keys: list[Any] = []
    for n in saved_nodes:
        key = _torch.storage_key(_tensor_val(n))
        if key not in keys:
            keys.append(key)
    tensors = [_saved_tensor(n, keys.index(_torch.storage_key(_tensor_val(n))))
               for n in saved_nodes]

    groups = []
    for gid, key in enumerate(keys):
        members = [t for t in tensors if t.group == gid]
        producer = producers.get(key)
        source = sources.get(producer.name, Source.INTERMEDIATE) if producer else Source.INTERMEDIATE
        start = sympy.Min(*[t.storage_offset * t.itemsize for t in members])
        end = sympy.Max(*[t.storage_offset * t.itemsize + t.nbytes for t in members])
        groups.append(StorageGroup(
            id=gid,
            source=source,
            members=tuple(t.name for t in members),
            byte_start=sympy.simplify(start),
            nbytes=sympy.simplify(end - start),
            root=_root(producer) if producer is not None and source is Source.INTERMEDIATE else None,
            user_visible=key in user_visible,
        ))
    return SavedSet(tuple(tensors), tuple(groups), _symbol_ranges(saved_nodes))


def collect_inputs(fw: fx.GraphModule, static_input_indices: Sequence[int]) -> tuple[SavedTensor, ...]:
    """The forward's non-static tensor inputs, as a CUDA graph must stage them (offset 0)."""
    static = set(static_input_indices)
    out = []
    for i, p in enumerate(fw.graph.find_nodes(op="placeholder")):
        if i in static or _tensor_val(p) is None:
            continue
        t = _saved_tensor(p, -1)
        out.append(dataclasses.replace(t, storage_offset=sympy.Integer(0)))
    return tuple(out)


def find_out_overload(target: Any) -> tuple[Any, str | None]:
    """The out= overload that computes what ``target`` computes, or (None, why not)."""
    if not isinstance(target, _torch.OpOverload):
        return None, f"{getattr(target, '__name__', target)} is not an ATen operator"
    schema = target._schema
    if schema.is_mutable:
        return None, f"{target} mutates an argument"
    if len(schema.returns) != 1 or str(schema.returns[0].type) != "Tensor":
        return None, f"{target} returns {len(schema.returns)} values"
    if schema.returns[0].alias_info is not None:
        return None, f"{target} returns a view"
    want = [(a.name, str(a.type)) for a in schema.arguments]
    packet = target.overloadpacket
    for name in packet.overloads():
        cand = getattr(packet, name)
        args = cand._schema.arguments
        outs = [a for a in args if a.is_out]
        if len(outs) == 1 and [(a.name, str(a.type)) for a in args if not a.is_out] == want:
            return cand, None
    return None, f"{packet} has no out= form with the arguments of {target}"


def mutated_placeholders(gm: fx.GraphModule) -> set[fx.Node]:
    """Placeholders some op writes in place (AOTAutograd keeps some input mutations, such as
    ``x.mul_(2)`` on an input, inside the graph as ``copy_(x, ...)``)."""
    placeholders = set(gm.graph.find_nodes(op="placeholder"))
    out = set()
    for n in gm.graph.nodes:
        schema = getattr(n.target, "_schema", None)
        if schema is None:
            continue
        for arg, value in zip(schema.arguments, n.args):
            if arg.alias_info is not None and arg.alias_info.is_write and value in placeholders:
                out.add(value)
    return out


def resolve_overload(qualname: str) -> _torch.OpOverload:
    """``"aten::mm.out"`` -> ``torch.ops.aten.mm.out``."""
    ns, rest = qualname.split("::")
    packet, _, overload = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, ns), packet), overload or "default")


def _outputs(gm: fx.GraphModule) -> list[Any]:
    return list(next(iter(gm.graph.find_nodes(op="output"))).args[0])


def _tensor_val(n: Any) -> torch.Tensor | None:
    v = n.meta.get("val") if isinstance(n, fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _check_backward_reads(bw: fx.GraphModule, saved: list[fx.Node]) -> None:
    names = {p.name for p in bw.graph.find_nodes(op="placeholder")}
    missing = [n.name for n in saved if n.name not in names]
    if missing:
        raise AssertionError(f"fxslots: saved tensors {missing} are not backward placeholders")


def _storage_producers(fw: fx.GraphModule) -> dict[Any, fx.Node]:
    """For each storage, the first node whose value lives in it (its allocator)."""
    first: dict[Any, fx.Node] = {}
    for n in fw.graph.nodes:
        v = _tensor_val(n)
        if v is not None:
            first.setdefault(_torch.storage_key(v), n)
    return first


def _placeholder_sources(fw: fx.GraphModule, static_idx: Sequence[int]) -> dict[str, Source]:
    static = set(static_idx)
    return {p.name: Source.PARAM if i in static else Source.INPUT
            for i, p in enumerate(fw.graph.find_nodes(op="placeholder"))}


def _saved_tensor(n: fx.Node, group: int) -> SavedTensor:
    v = _tensor_val(n)
    shape = tuple(expr(s) for s in v.shape)
    stride = tuple(expr(s) for s in v.stride())
    dense, overlapping = _layout(v)
    return SavedTensor(
        name=n.name, shape=shape, stride=stride, storage_offset=expr(v.storage_offset()),
        dtype=v.dtype, device=str(v.device), group=group, dense=dense, overlapping=overlapping,
    )


_hint = _torch.size_hint


def _layout(v: torch.Tensor) -> tuple[bool, bool]:
    """(dense, overlapping) judged on the shape hints: dense means one copy fills the span;
    overlapping means two indices reach one element through nonzero strides."""
    dims = sorted((_hint(st), _hint(s)) for s, st in zip(v.shape, v.stride(), strict=True)
                  if _hint(s) != 1)
    if any(s == 0 for _, s in dims):
        return True, False
    expanded = any(st == 0 for st, _ in dims)
    reach = 1
    overlapping = False
    dense = not expanded
    for st, s in (d for d in dims if d[0] != 0):
        if st < reach:
            overlapping = True
        if st != reach:
            dense = False
        reach = max(reach, st * s)
    return dense and not overlapping, overlapping


def _root(producer: fx.Node) -> Root | None:
    """The producer as a group root when its value densely covers its whole storage."""
    v = _tensor_val(producer)
    dense, _ = _layout(v)
    covers = sympy.simplify(expr(v.untyped_storage().nbytes()) - expr(v.numel()) * v.element_size())
    if not dense or expr(v.storage_offset()) != 0 or covers != 0:
        return None
    overload, why = find_out_overload(producer.target)
    return Root(
        name=producer.name,
        shape=tuple(expr(s) for s in v.shape),
        stride=tuple(expr(s) for s in v.stride()),
        dtype=v.dtype,
        out_overload=None if overload is None else overload._schema.name + "." + (
            overload._overloadname),
        why_not_out=why,
    )


def _symbol_ranges(nodes: list[fx.Node]) -> dict[sympy.Symbol, tuple[int, int | None]]:
    vals = [_tensor_val(n) for n in nodes]
    env = _torch.shape_env_of(vals)
    if env is None:
        return {}
    syms = set()
    for v in vals:
        for x in (*v.shape, *v.stride(), v.storage_offset()):
            syms |= expr(x).free_symbols
    out = {}
    for s in sorted(syms, key=str):
        r = env.var_to_range.get(s)
        lo = int(r.lower) if r is not None and r.lower.is_Integer else 0
        hi = int(r.upper) if r is not None and r.upper.is_Integer else None
        out[s] = (lo, hi)
    return out
