"""Analysis: list every saved-tensor edge of a partitioned forward/backward pair.

Reads FakeTensor metadata only; changes nothing. Builds no ``sympy.simplify``: sizes stay the
expressions the ShapeEnv gave, and equalities are checked at sample shapes
(``geometry.same_value``), so collecting is linear in the graph.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, Sequence

import sympy
import torch
import torch.fx as fx

from .. import _torch
from ..errors import PassError
from ..geometry import same_value
from ..out_variants import OWN_KERNELS
from ..routes import copy_source, find_route
from ..seeds import host_read_seed
from ..schemas import RNG_STATE, Root, SavedSet, SavedTensor, Source, StorageGroup, expr
from .absolute import unstageable_reads
from .layouts import dense_overlapping, lazy_bit, unbuilt_scratch


def collect_saved(
    fw: fx.GraphModule,
    bw: fx.GraphModule,
    num_fwd_outputs: int,
    static_input_indices: Sequence[int],
    kernels: str = "aten",
) -> SavedSet:
    """The saved tensors of ``fw`` (outputs past the first ``num_fwd_outputs`` that ``bw`` reads),
    grouped by the storage they view. RNG states and symbolic ints pass through untouched.
    Under ``kernels="inductor"`` a group of symbolic size does not take fxslots' own attention
    kernel (below)."""
    outputs = _outputs(fw)
    tensors, passthrough = [], []
    for out_i, node, bw_i in match_backward(outputs, bw, num_fwd_outputs):
        if _torch.saves_rng_state(node) or _tensor_val(node) is None:
            passthrough.append((node.name, RNG_STATE if _tensor_val(node) is not None
                                else "not a tensor"))
        else:
            why = host_read_seed(node) or lazy_bit(node, _tensor_val(node))
            if why is not None:
                raise PassError(node.name, why)
            tensors.append((out_i, node, bw_i))
    keys: dict[Any, int] = {}
    for _, n, _ in tensors:
        keys.setdefault(_torch.storage_key(_tensor_val(n)), len(keys))
    saved = [_saved_tensor(n, keys[_torch.storage_key(_tensor_val(n))], out_i, bw_i)
             for out_i, n, bw_i in tensors]
    ranges, guards = _shape_symbols([n for _, n, _ in tensors])
    user_visible = {_torch.storage_key(v) for n in outputs[:num_fwd_outputs]
                    if (v := _tensor_val(n)) is not None}
    groups = _groups(fw, saved, keys, static_input_indices, user_visible, ranges)
    if kernels == "inductor":
        groups = _without_own_kernel(groups)
    unstageable = unstageable_reads(  # raises where a slot would move what a node reads
        fw, bw, {k: groups[gid] for k, gid in keys.items()},
        {bw_i: groups[s.group] for (_, _, bw_i), s in zip(tensors, saved, strict=True)},
        set(static_input_indices))
    return SavedSet(tuple(saved), tuple(groups), ranges, tuple(passthrough), guards, unstageable)


def _groups(fw, saved: list[SavedTensor], keys: dict[Any, int], static_input_indices,
            user_visible: set, ranges) -> list[StorageGroup]:
    """One group per storage, in order of first appearance, with its root when the forward
    allocates it."""
    producers = _storage_producers(fw)
    sources = _placeholder_sources(fw, static_input_indices)
    groups = []
    for key, gid in keys.items():
        producer = producers.get(key)
        source = (sources.get(producer.name, Source.INTERMEDIATE) if producer
                  else Source.INTERMEDIATE)
        root = _root(producer, ranges) if producer and source is Source.INTERMEDIATE else None
        groups.append(_group(gid, [t for t in saved if t.group == gid], source, root,
                             key in user_visible))
    return groups


def _without_own_kernel(groups: list[StorageGroup]) -> list[StorageGroup]:
    """Under Inductor fxslots' attention op is one call that writes its outputs where it is
    given (``passes/lower.py``). With symbolic sizes, an output no slot holds is written into
    an empty tensor the op resizes, unseen by Inductor: read in the forward (an offloaded or
    user-visible attention output), Inductor could not take the graph and the whole forward
    would run its ATen kernels. There attention keeps PyTorch's kernel and its one copy, for
    every output of the call: its seed and offset are static even then (H200 run 40a), and
    one output left in a slot would put the op back in the graph."""
    symbolic = {_call(g) for g in groups if _own_kernel(g)
                and not all(expr(d).is_number for d in g.root.shape)}
    return [_pytorch_kernel(g) if _own_kernel(g) and _call(g) in symbolic else g
            for g in groups]


def _own_kernel(g: StorageGroup) -> bool:
    return g.root is not None and g.root.out_overload in OWN_KERNELS


def _call(g: StorageGroup) -> str:
    return g.root.producer or g.root.name


def _pytorch_kernel(g: StorageGroup) -> StorageGroup:
    why = (f"{g.root.out_overload} is fxslots' own kernel, which Inductor takes only at "
           f"static sizes (kernels=\"inductor\")")
    return dataclasses.replace(g, root=dataclasses.replace(
        g.root, out_overload=None, why_not_out=why, via=None,
        remedy="static shapes, or kernels=\"aten\", where fxslots' attention kernel writes it "
               "in place"))


def match_backward(outputs: list[Any], bw: fx.GraphModule, num_fwd_outputs: int,
                   check: bool = True):
    """(forward output index, forward node, backward placeholder index) of every saved value
    but the symbolic ints, matched by position as AOTAutograd passes them: the forward
    returns ``user outputs + saved values + saved symints``, the backward takes
    ``saved symints + saved values + tangents``. Names may differ (an RNG state that
    checkpointing saves is ``getitem_2`` in the forward, ``rng_state_output_0`` in the
    backward). ``check``: that each pair holds values of one kind."""
    saved = outputs[num_fwd_outputs:]
    n_sym = sum(1 for n in saved if isinstance(n, fx.Node) and _torch.is_sym_node(n))
    values = saved[:len(saved) - n_sym]
    misplaced = [n for n in values if not isinstance(n, fx.Node) or _torch.is_sym_node(n)]
    if misplaced:
        raise PassError(str(misplaced[0]), "a saved value that is not a graph node, or a "
                        "symbolic int among the saved tensors (AOTAutograd saves them last)")
    placeholders = list(bw.graph.find_nodes(op="placeholder"))
    if len(placeholders) < n_sym + len(values):
        raise PassError(None, f"the backward takes {len(placeholders)} inputs, fewer than the "
                              f"{n_sym + len(values)} values the forward saves")
    out = []
    for i, node in enumerate(values):
        if check:
            _check_same_kind(node, placeholders[n_sym + i])
        out.append((num_fwd_outputs + i, node, n_sym + i))
    return out


def _check_same_kind(node: fx.Node, ph: fx.Node) -> None:
    a, b = node.meta.get("val"), ph.meta.get("val")
    if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor) or (
            isinstance(a, torch.Tensor) and (a.dtype, a.dim()) != (b.dtype, b.dim())):
        raise PassError(node.name, f"the forward saves {_kind(a)} where the backward's input "
                                   f"{ph.name} is {_kind(b)}: they are out of step")


def _kind(v: Any) -> str:
    return f"a {v.dtype} tensor of {v.dim()} dims" if isinstance(v, torch.Tensor) else (
        type(v).__name__)


def _group(gid: int, members: list[SavedTensor], source: Source, root: Root | None,
           user_visible: bool) -> StorageGroup:
    # Min/Max without simplify: equal bounds collapse, comparable ones evaluate.
    starts = {t.storage_offset * t.itemsize for t in members}
    ends = {t.storage_offset * t.itemsize + t.nbytes for t in members}
    start = starts.pop() if len(starts) == 1 else sympy.Min(*starts)
    end = ends.pop() if len(ends) == 1 else sympy.Max(*ends)
    return StorageGroup(id=gid, source=source, members=tuple(t.name for t in members),
                        byte_start=start, nbytes=end - start, root=root,
                        user_visible=user_visible)


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


def mutated_placeholders(gm: fx.GraphModule) -> set[fx.Node]:
    """Placeholders some op writes in place (AOTAutograd keeps some input mutations, such as
    ``x.mul_(2)`` on an input, inside the graph as ``copy_(x, ...)``)."""
    placeholders = set(gm.graph.find_nodes(op="placeholder"))
    out = set()
    for n in gm.graph.nodes:
        if not isinstance(n.target, _torch.OpOverload):
            continue
        arguments = _torch.op_schema(n.target).arguments[:len(n.args)]  # the positional ones
        for arg, value in zip(arguments, n.args, strict=True):
            if arg.alias_info is not None and arg.alias_info.is_write and value in placeholders:
                out.add(value)
    return out


def _outputs(gm: fx.GraphModule) -> list[Any]:
    return list(next(iter(gm.graph.find_nodes(op="output"))).args[0])


def _tensor_val(n: Any) -> torch.Tensor | None:
    v = n.meta.get("val") if isinstance(n, fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


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


def _saved_tensor(n: fx.Node, group: int, output_index: int = -1,
                  backward_index: int = -1) -> SavedTensor:
    v = _tensor_val(n)
    dense, overlapping = dense_overlapping(v)
    return SavedTensor(
        name=n.name, shape=tuple(expr(s) for s in v.shape),
        stride=tuple(expr(s) for s in v.stride()), storage_offset=expr(v.storage_offset()),
        dtype=v.dtype, device=str(v.device), group=group, dense=dense, overlapping=overlapping,
        output_index=output_index, backward_index=backward_index,
    )


def _root(producer: fx.Node, ranges) -> Root | None:
    """The producer as a group root when its value densely covers its whole storage, with
    the route that writes it into given memory (or why there is none)."""
    v = _tensor_val(producer)
    dense, _ = dense_overlapping(v)
    storage = expr(v.untyped_storage().nbytes())
    if not dense or expr(v.storage_offset()) != 0 or not same_value(
            storage, expr(v.numel()) * v.element_size(), ranges):
        return None
    op, output = producer, 0
    parent = producer.args[0] if producer.target is operator.getitem else None
    if isinstance(parent, fx.Node) and isinstance(parent.meta.get("val"), (tuple, list)):
        op, output = parent, producer.args[1]  # one output of a multi-output op
    src = copy_source(op.target)
    src_val = _tensor_val(op.args[src]) if src is not None and len(op.args) > src else None
    route = find_route(op.target, v.device.type, None if src_val is None else src_val.device.type,
                       op.args, op.kwargs)
    # fxslots' own kernels lay an empty scratch out as they return it (attention.py)
    if (op is not producer and route.op is not None and route.op not in OWN_KERNELS
            and (why := unbuilt_scratch(op, output, ranges)) is not None):
        route = dataclasses.replace(route, op=None, why=why, remedy=None)
    return Root(
        name=producer.name, shape=tuple(expr(s) for s in v.shape),
        stride=tuple(expr(s) for s in v.stride()), dtype=v.dtype,
        out_overload=route.op, why_not_out=route.why, remedy=route.remedy,
        producer=None if op is producer else op.name, output=output, via=route.via,
    )


def _shape_symbols(nodes: list[fx.Node]) -> tuple[dict[sympy.Symbol, tuple[int, int | None]],
                                                   tuple[sympy.Basic, ...]]:
    """Each shape symbol's range, and Dynamo's guards that involve only these symbols."""
    vals = [_tensor_val(n) for n in nodes]
    env = _torch.shape_env_of(vals)
    if env is None:
        return {}, ()
    syms = set()
    for v in vals:
        for x in (*v.shape, *v.stride(), v.storage_offset()):
            syms |= expr(x).free_symbols
    guards = tuple(g for g in _torch.symbol_guards(env)
                   if g.free_symbols and g.free_symbols <= syms)
    return {s: _torch.symbol_range(env, s) for s in sorted(syms, key=str)}, guards
