"""Retype: give a norm's statistics the dtype its ATen kernel returns, where torch's fake
kernels say another.

A batch, layer or group norm over a bf16 or fp16 input whose weight, bias or running
statistics are fp32 (norms kept in fp32 in a bf16 model; autocast's bf16 convolution into a
batch norm) computes its mean and inverse deviation in fp32 and returns them in fp32 (ATen's
``is_mixed_type``), on CPU and CUDA alike. torch's fake kernels give them the input's dtype on
CPU. fxslots types slots and scratch by the fake values, so the statistics went, by their
out= kernel, into memory of the wrong dtype (which the kernel refuses), or by a copy into a
bf16 slot (rounding them, for the backward to refuse). ATen kernels run these nodes as they
are, so the values must say what those kernels return; Inductor computes the statistics
itself, by the fake values, and is left alone (``kernels="inductor"`` never runs this pass).
"""

from __future__ import annotations

import contextlib
import operator

import torch
import torch.fx as fx

from .. import _torch
from .collect import match_backward

aten = torch.ops.aten

_REDUCED = (torch.bfloat16, torch.float16)
_STATISTICS = (1, 2)  # the outputs of each norm below that are its mean and inverse deviation


def _ops(*names: str) -> frozenset:
    """The overloads named ``packet`` or ``packet.overload`` this torch has."""
    ops = set()
    for name in names:
        packet, _, overload = name.partition(".")
        if (p := getattr(aten, packet, None)) is not None and hasattr(p, overload or "default"):
            ops.add(getattr(p, overload or "default"))
    return frozenset(ops)


_NORMS = _ops("native_layer_norm", "native_group_norm", "native_batch_norm",
              "_native_batch_norm_legit", "_native_batch_norm_legit.no_stats",
              "_native_batch_norm_legit_functional", "_native_batch_norm_legit_no_training",
              "_batch_norm_with_update", "_batch_norm_with_update_functional",
              "_batch_norm_no_update")


def retype_statistics(fw: fx.GraphModule, bw: fx.GraphModule, num_fwd_outputs: int) -> int:
    """Set the fake values of mixed-dtype norms' statistics in ``fw`` to fp32, then of every
    node downstream of them, in ``fw`` and, through the saved ones, in ``bw`` (their fake
    kernels run again on the new values: a ``detach`` of a statistic stays its view); the
    number of statistics retyped."""
    retyped: set[fx.Node] = set()
    for node in fw.graph.nodes:
        if node.op == "call_function" and node.target in _NORMS and _mixed(node):
            retyped |= _retype(node)
    if not retyped:
        return 0
    changed = _propagate(fw.graph, retyped)
    placeholders = list(bw.graph.find_nodes(op="placeholder"))
    outputs = list(next(iter(fw.graph.find_nodes(op="output"))).args[0])
    saved = set()
    for _, node, bw_i in match_backward(outputs, bw, num_fwd_outputs, check=False):
        if node in changed:
            placeholders[bw_i].meta["val"] = node.meta["val"]
            saved.add(placeholders[bw_i])
    _propagate(bw.graph, saved)
    return len(retyped)


def _propagate(graph: fx.Graph, changed: set[fx.Node]) -> set[fx.Node]:
    """``changed`` and every node that reads one of them, transitively, with its fake value
    computed again from its inputs' (graph order is an order of data flow)."""
    changed = set(changed)
    for node in graph.nodes:
        if node.op != "call_function" or node in changed or not any(
                a in changed for a in node.all_input_nodes):
            continue
        args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda a: a.meta.get("val"))
        with _fake_mode(node):
            node.meta["val"] = node.target(*args, **kwargs)
        changed.add(node)
    return changed


def _fake_mode(node: fx.Node):
    for a in node.all_input_nodes:
        if _torch.is_fake(v := a.meta.get("val")):
            return v.fake_mode
    return contextlib.nullcontext()


def _mixed(node: fx.Node) -> bool:
    """A reduced-precision input with an fp32 weight, bias or running statistic, on a device
    whose kernels are known to return fp32 statistics then."""
    x, *rest = [a.meta.get("val") if isinstance(a, fx.Node) else None for a in node.args]
    if not isinstance(x, torch.Tensor) or x.dtype not in _REDUCED or x.device.type not in (
            "cpu", "cuda"):
        return False
    return any(isinstance(v, torch.Tensor) and v.dtype == torch.float32 for v in rest)


def _retype(node: fx.Node) -> set[fx.Node]:
    """The node's statistics as fp32 in its tuple value and in its ``getitem`` users' values
    (those changed)."""
    values = list(node.meta["val"])
    if all(values[i].dtype == torch.float32 for i in _STATISTICS):
        return set()  # the fake kernel knew (CUDA's, mostly)
    for i in _STATISTICS:
        values[i] = values[i].to(torch.float32)
    node.meta["val"] = type(node.meta["val"])(values)
    retyped = set()
    for user in node.users:
        if user.target is operator.getitem and user.args[1] in _STATISTICS:
            user.meta["val"] = values[user.args[1]]
            retyped.add(user)
    return retyped
