"""Deliver: a graph that writes the results it hands out into an output buffer itself: a
backward its gradients (the region's buffer), a forward its large outputs (its slot's).

A captured backward leaves its gradients in the pool, which the next replay of any graph reuses
as scratch, so the runtime used to copy them out after each replay into memory the caller owns
(``runtime/cudagraphs/staging.OutputBuffer``): one read and one write of every gradient byte,
and, at the end of the backward, every gradient held twice (in the pool and in the copy). This
pass makes a copy of the backward graph that takes one view of the output buffer per delivered
gradient (placeholders appended last) and returns the gradients there:

- a gradient computed by an op with an out= kernel (a weight gradient's ``mm``), possibly seen
  through views (``t``, ``permute``, ``view``), is computed into its buffer: no copy at all;
- any other gets ``copy_`` into its buffer right after it is computed. Inductor computes such a
  value inside the kernel that stores it, so there too it is stored once;
- under Inductor, a scatter-add over fresh zeros (an embedding's gradient) zeroes the buffer and
  scatters into it (``_scatter_into``): copied, Inductor scattered into a buffer of its own and
  copied that, one temporary and one copy of the gradient's size (25 MB on fp32 llama-small).

Only parameters' gradients of a static shape on the graph's device are delivered (the buffer's
layout is fixed when the graph is made, and an input's gradient flows on to whoever may keep
it); the others stay as they were, copied out after the replay.

A forward's user outputs are the same: each replay wrote them into the pool, then copied them
out for the caller, and the pool was sized by them (heavy's 64 MiB output was two thirds of its
pool, H200 run 30c). ``fresh_outputs`` picks the ones to deliver into the slot's buffer.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch
import torch.fx as fx

from .. import _torch, ops
from ..routes import COPY, find_route, out_arguments, out_kwargs, resolve, updated_arguments
from ..schemas import SLOT_META, expr
from ..sizes import rows_dense
from .accumulate import twin_with_buffers
from .layouts import dense_overlapping  # dense: one span the buffer holds exactly

aten = torch.ops.aten

# Ops whose value is a view of their first argument: a gradient seen through them is delivered
# by computing their base into the buffer.
_VIEWS = frozenset({aten.t.default, aten.permute.default, aten.view.default,
                    aten._unsafe_view.default, aten.transpose.int, aten.alias.default,
                    aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims})


@dataclass(frozen=True)
class Delivered:
    """One delivered gradient: the (dtype, shape, stride) of the buffer region it arrives in,
    and whether its producer writes there (else a ``copy_``)."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    in_place: bool


def deliverable(bw: fx.GraphModule, device: torch.device, params: Iterable[int]) -> list[int]:
    """The backward outputs that can be delivered: the gradient of a parameter (an input at
    ``params``), a dense tensor of static shape on ``device``, returned once. Not an input's
    gradient: it flows on (to an earlier pipeline stage, say) and may be kept there past the
    next backward, which would move the buffer every time."""
    outs = list(next(iter(bw.graph.find_nodes(op="output"))).args[0])
    nodes = [o for o in outs if isinstance(o, fx.Node)]
    return [i for i in sorted(set(params))
            if i < len(outs) and _fits(outs[i], device, nodes, 0)]


def _fits(o: Any, device: torch.device, nodes: list[fx.Node], min_bytes: int) -> bool:
    """Whether output ``o`` is a dense tensor of static shape on ``device``, of at least
    ``min_bytes``, returned once (``nodes``: every node the graph returns)."""
    v = o.meta.get("val") if isinstance(o, fx.Node) else None
    return (isinstance(v, torch.Tensor) and v.device == device and _static(v)
            and dense_overlapping(v)[0] and v.numel() * v.element_size() >= min_bytes
            and nodes.count(o) == 1)


# A forward's outputs smaller than this stay in the pool, copied out: they cost the pool
# nothing it lacks, and a loop that holds its last output (``loss = model(x)``) would keep the
# buffer busy at each next forward.
MIN_OUTPUT_BYTES = 1 << 20


def fresh_outputs(fw: fx.GraphModule, device: torch.device, n: int) -> list[int]:
    """The forward outputs among the first ``n`` (the caller's) that can be delivered: a dense
    tensor of static shape on ``device``, at least ``MIN_OUTPUT_BYTES``, returned once, computed
    by the graph (seen through views) and not written into memory it was given: not an input,
    nor a saved value in the slot (those are copied out of the slot)."""
    outs = list(next(iter(fw.graph.find_nodes(op="output"))).args[0])
    nodes = [o for o in outs if isinstance(o, fx.Node)]
    return [i for i, o in enumerate(outs[:n]) if _fits(o, device, nodes, MIN_OUTPUT_BYTES)
            and _base(o).op == "call_function" and not _writes(_base(o))]


def _writes(node: fx.Node) -> bool:
    """Whether ``node``'s op writes an argument (an out= kernel into a slot view, a copy_)."""
    schema = getattr(node.target, "_schema", None)
    return schema is None or schema.is_mutable


def deliver_outputs(gm: fx.GraphModule, outputs: list[int], extern: Callable[[Any], bool] | None,
                    prefix: str = "grad_out", noun: str = "gradient"
                    ) -> tuple[fx.GraphModule, tuple[Delivered, ...]]:
    """A new graph that writes its outputs at ``outputs`` into buffers passed last (in
    ``outputs`` order, named ``<prefix>_<i>``; ``noun`` names what they hold) and returns them
    there. ``extern``: for Inductor's form (None: ATen's), whether Inductor runs an op as an
    ATen call (only those write through an out= op; Inductor stores its own kernels' values
    into the buffer from the kernel)."""
    gm, output, outs, buffers = twin_with_buffers(gm, outputs, prefix)
    graph = gm.graph
    roots: set[fx.Node] = set()
    delivered = tuple(_deliver_one(graph, outs, i, buf, buffers[-1], roots, extern, noun)
                      for buf, i in zip(buffers, outputs, strict=True))
    output.args = (tuple(outs),)
    graph.lint()
    gm.recompile()
    return gm, tuple(delivered)


def _deliver_one(graph: fx.Graph, outs: list, i: int, buf: fx.Node, last: fx.Node,
                 roots: set[fx.Node], extern: Callable[[Any], bool] | None, noun: str
                 ) -> Delivered:
    """Make output ``i`` arrive in ``buf``: its producer (under views) writes there, or a
    ``copy_`` right after it (after ``last``, the last placeholder, for an input)."""
    grad = outs[i]
    root = _base(grad)
    out_op = _out_op(root, extern) if root not in roots else None
    v = (root if out_op is not None else grad).meta["val"]
    buf.meta["val"] = _like(v)
    buf.meta[SLOT_META] = f"the output buffer's region for {noun} {i}"
    if extern is not None and grad is root and _over_zeros(root):
        _scatter_into(graph, root, buf)
        outs[i] = buf
        return Delivered(v.dtype, tuple(v.shape), tuple(v.stride()), True)
    if out_op is not None:
        roots.add(root)
        _write_into(graph, root, out_op, buf, extern is not None)
        # Inductor's form has no node for the root any more: the buffer stands for it
        outs[i] = buf if grad is root and extern is not None else grad
    else:
        with graph.inserting_after(grad if grad.op != "placeholder" else last):
            outs[i] = graph.call_function(aten.copy_.default, (buf, grad))
        outs[i].meta["val"] = buf.meta["val"]
        outs[i].meta[SLOT_META] = f"{noun} {i} copied into the output buffer"
    return Delivered(v.dtype, tuple(v.shape), tuple(v.stride()), out_op is not None)


# Scatter-adds Inductor generates (``_unsafe_masked_index_put_accumulate`` is how its
# decomposition writes ``embedding_dense_backward``), by the position of their values.
SCATTER_ADDS = {aten._unsafe_masked_index_put_accumulate.default: 3, aten.index_put.default: 2,
                 aten._unsafe_index_put.default: 2}


def _over_zeros(root: fx.Node) -> bool:
    """Whether ``root`` scatter-adds into zeros only it reads, and only as the tensor it
    scatters into, of its own dtype and shape, its arguments positional up to the values."""
    at = SCATTER_ADDS.get(root.target)
    if at is None or len(root.args) <= at:
        return False
    base, v = root.args[0], root.meta.get("val")
    accumulate = root.target is aten._unsafe_masked_index_put_accumulate.default or (
        root.kwargs.get("accumulate", len(root.args) > 3 and root.args[3]) is True)
    return (accumulate and isinstance(base, fx.Node) and base.target is aten.full.default
            and len(base.users) == 1 and base not in root.args[1:] and base.args[1] == 0
            and isinstance(v, torch.Tensor) and list(base.args[0]) == list(v.shape)
            and base.kwargs.get("dtype") == v.dtype)


def _scatter_into(graph: fx.Graph, root: fx.Node, buf: fx.Node) -> None:
    """Replace ``root`` (``_over_zeros``) by a fill of ``buf`` with zeros and ``index_put_`` of
    the same values into it; the masked form as Inductor lowers it: the masked-off values
    zeroed, the indices clamped into range."""
    zeros, masked = root.args[0], root.target is aten._unsafe_masked_index_put_accumulate.default
    mode = _mode_of(root.meta["val"])

    def call(target: Any, *args: Any, **kwargs: Any) -> fx.Node:
        node = graph.call_function(target, args, kwargs)
        with mode:
            node.meta["val"] = target(*fx.node.map_arg(args, lambda a: a.meta["val"]), **kwargs)
        return node

    with graph.inserting_before(root):
        if masked:  # ops Inductor lowers as they are: not clamp nor where.ScalarOther
            _, mask, indices, values = root.args[:4]
            v = values.meta["val"]
            zero = call(aten.full.default, [], 0, dtype=v.dtype, device=v.device)
            values = call(aten.where.self, mask, values, zero)
            indices = [i if i is None else call(aten.clamp_min.default,
                                                call(aten.clamp_max.default, i, n - 1), -n)
                       for i, n in zip(indices, root.meta["val"].shape)]
        else:
            indices, values = root.args[1:3]
        # aten's checked scatter, not Inductor's unchecked prim (its lowering of the _unsafe
        # forms): that prim run by ATen (torch 2.13) adds every value twice
        put = call(aten.index_put_.default, call(aten.fill_.Scalar, buf, 0), indices, values,
                   True)
    put.meta[SLOT_META] = "scattered into the output buffer"
    root.replace_all_uses_with(put)
    graph.erase_node(root)
    graph.erase_node(zeros)  # ``_over_zeros``: root was its one user


def _base(node: fx.Node) -> fx.Node:
    while node.op == "call_function" and node.target in _VIEWS:
        node = node.args[0]
    return node


def _out_op(root: fx.Node, extern: Callable[[Any], bool] | None, symbolic: bool = False
            ) -> Any:
    """The out= overload ``root`` can write its buffer with, or None; ``symbolic``: a value
    of symbolic size qualifies too where it is row-major (a buffer packed at compile time
    cannot hold one; a view made per shape can)."""
    if not isinstance(root.target, _torch.OpOverload) or not isinstance(
            root.meta.get("val"), torch.Tensor):
        return None
    if extern is not None and not extern(root.target):
        return None  # Inductor's own kernel: it stores the value into the buffer itself
    v = root.meta["val"]
    if not (_static(v) or symbolic and _row_major(v)) or not dense_overlapping(v)[0]:
        return None
    route = find_route(root.target, v.device.type)
    if route.op is None or route.op == COPY or route.via is not None:
        return None
    out_op = resolve(route.op)
    if len(out_arguments(out_op)) != 1 or updated_arguments(out_op):
        return None
    return out_op


def _write_into(graph: fx.Graph, root: fx.Node, out_op: Any, buf: fx.Node, inductor: bool
                ) -> None:
    name = out_arguments(out_op)[0]
    if inductor:  # Inductor refuses ops that return an input: one that returns nothing
        with graph.inserting_before(root):
            call = graph.call_function(ops.into_op(out_op), root.args,
                                       {**out_kwargs(out_op, root.kwargs), name: buf})
        call.meta[SLOT_META] = f"computed into the output buffer ({out_op})"
        root.replace_all_uses_with(buf)
        graph.erase_node(root)
        return
    root.target, root.kwargs = out_op, {**out_kwargs(out_op, root.kwargs), name: buf}
    root.meta[SLOT_META] = f"computed into the output buffer ({out_op})"


def _static(v: torch.Tensor) -> bool:
    return all(isinstance(x, int) for x in (*v.shape, *v.stride(), v.storage_offset()))


def _row_major(v: torch.Tensor) -> bool:
    """Row-major at offset 0 at every shape."""
    return expr(v.storage_offset()) == 0 and rows_dense(v)


def _like(v: torch.Tensor) -> torch.Tensor:
    with _mode_of(v):
        return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=v.device)


def _mode_of(v: torch.Tensor) -> Any:
    """Where values like ``v`` are made: its fake mode, or nowhere special for a real one."""
    return v.fake_mode if _torch.is_fake(v) else contextlib.nullcontext()
