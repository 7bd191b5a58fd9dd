"""Share: a saved log-softmax's input computed in the slot bytes the log-softmax then writes
over, instead of the CUDA graph pool (ATen kernels; symbolic shapes too).

A language model's loss takes the log-softmax of its logits in float32: the forward makes a
float32 copy of the logits (``_to_copy``), read only by the log-softmax, whose result is saved
and written copy-free into its slot. The copy is as large as the saved result and lives in
the pool beside it; on llama-large's shape it is 1000 MiB of the forward's 1532 (H100 run 54b).
The log-softmax reads a row before it writes it (``fxslots.rowwise``, checked on this torch's
kernel), so the copy can be written into the slot view itself and the log-softmax computed
over it there, with the bits it gives beside it.

The input qualifies when its node is the log-softmax's only reader, computes a fresh tensor of
the result's dtype, shape and stride through an out= kernel, and the log-softmax runs over the
last dimension of that dense tensor.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from .. import rowwise
from ..routes import copy_source
from ..schemas import SLOT_META
from ..sizes import same_geometry
from .deliver import _out_op, _write_into
from .lifetimes import may_return_alias

aten = torch.ops.aten
_LOG_SOFTMAX_OUT = aten._log_softmax.out


def share_slot(fw: fx.GraphModule) -> int:
    """Rewrite ``fw`` (a forward ``rewrite_forward`` put in its slots) in place; returns how
    many inputs now compute into a slot view."""
    shared = 0
    for n in list(fw.graph.nodes):
        view = n.kwargs.get("out") if n.target == _LOG_SOFTMAX_OUT else None
        x = n.args[0] if view is not None else None
        if x is None or not _slot_view(view) or not _fits(x, n):
            continue
        src = copy_source(x.target)
        if src is not None:  # _to_copy is empty + copy_: the same conversion, into the view
            x.target, x.args, x.kwargs = aten.copy_.default, (view, x.args[src]), {}
        else:
            _write_into(fw.graph, x, _out_op(x, None, symbolic=True), view, False)
        x.meta[SLOT_META] = (f"computed in the slot view {view.name} that {n.name} then writes "
                             f"over")
        shared += 1
    if shared:
        fw.graph.lint()
        fw.recompile()
    return shared


def _slot_view(node) -> bool:
    return isinstance(node, fx.Node) and node.op == "placeholder" and SLOT_META in node.meta


def _fits(x, n: fx.Node) -> bool:
    """Whether ``x`` can be computed in ``n``'s slot view (the module docstring's terms)."""
    if not isinstance(x, fx.Node) or x.op != "call_function" or len(x.users) != 1:
        return False
    src = copy_source(x.target)
    if may_return_alias(x.target) or (
            _out_op(x, None, symbolic=True) if src is None else _from(x, src)) is None:
        return False
    v = n.meta.get("val")
    return (same_geometry(x.meta.get("val"), v) and not n.args[2]
            and rowwise.along_rows(aten._log_softmax.default, v, n.args[1]))


def _from(x: fx.Node, src: int) -> fx.Node | None:
    """The tensor a copy op copies, where it is on the copy's device (a host-to-device copy
    is no kernel to write a slot with)."""
    a = x.args[src]
    u, w = x.meta.get("val"), a.meta.get("val") if isinstance(a, fx.Node) else None
    if isinstance(u, torch.Tensor) and isinstance(w, torch.Tensor) and w.device == u.device:
        return a
    return None
