"""Lower: the rewritten ATen forward, in the form Inductor compiles (``kernels="inductor"``).

The ATen rewrite writes a copy-free group with an out= overload, which Inductor cannot lower. Each
slot write becomes one it keeps, on a copy of the graph (the ATen graph stays what ``explain()``
prints and what runs if Inductor fails):

- an op Inductor runs as an ATen call (a matmul, a convolution, one of its fallbacks) becomes
  ``fxslots::<op>_out_into``, which writes the slot itself, and its readers read the slot:
  Inductor orders them after the write (it tracks mutations of graph inputs);
- any other op (Inductor generates its kernel) goes back to its functional form, followed by
  ``copy_(slot, value)``, and its readers read the ``copy_``: the value then has that one user,
  so Inductor computes it inside the kernel that stores it into the slot, and stores it once;
- a copy to the host arena (offload) becomes ``fxslots::offload_copy``; device copies stay.

Which slot writes Inductor's kernels really make in place is read from its generated code
afterwards (``passes/audit.py``), not assumed from this graph.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx as fx

from .. import _torch
from ..ops import into_op, offload_copy
from ..schemas import SlotView
from .rewrite import SLOT_META

aten = torch.ops.aten


class NotLowerable(Exception):
    """The ATen forward has a node this lowering cannot hand to Inductor."""


def lower_forward(fw: fx.GraphModule, extern: Callable[[Any], bool],
                  slot_vals: dict[str, Any]) -> fx.GraphModule:
    """A copy of ``fw`` in Inductor's form. ``extern(op)`` says whether Inductor runs ``op``
    as an ATen call; ``slot_vals`` holds an example (fake) tensor per slot placeholder."""
    gm = copy_graph(fw)
    graph = gm.graph
    for ph in graph.find_nodes(op="placeholder"):
        if ph.name in slot_vals:
            ph.meta["val"] = slot_vals[ph.name]
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        slot = node.kwargs.get("out")
        if _slot_view(slot) is not None:
            functional = functional_of(node.target)
            if functional is None:
                raise NotLowerable(f"no functional form of {node.target} ({node.name})")
            if extern(functional):
                _to_into(graph, node, slot)
            else:
                _to_copy(graph, node, slot, functional)
        elif node.target is aten.copy_.default and _is_host(node.args[0]):
            _to_offload(graph, node)
    graph.lint()
    gm.recompile()
    return gm


def functional_of(out_overload: Any) -> Any:
    """The overload of the same op that takes the arguments of ``out_overload`` but its out=
    one, and returns a fresh tensor (``aten.mm.out`` -> ``aten.mm.default``); or None."""
    want = [(a.name, str(a.type)) for a in _torch.schema_of(out_overload).arguments
            if not a.is_out]
    packet = out_overload.overloadpacket
    for name in packet.overloads():
        cand = getattr(packet, name)
        schema = _torch.schema_of(cand)
        if not schema.is_mutable and [(a.name, str(a.type)) for a in schema.arguments] == want:
            return cand
    return None


def copy_graph(fw: fx.GraphModule) -> fx.GraphModule:
    """A new GraphModule over a copy of ``fw``'s graph (node metadata shared, not copied)."""
    graph = fx.Graph()
    graph.output(graph.graph_copy(fw.graph, {}))
    gm = fx.GraphModule(fw, graph)
    gm.meta.update(getattr(fw, "meta", {}))
    return gm


def _slot_view(node: Any) -> SlotView | None:
    if isinstance(node, fx.Node) and node.op == "placeholder":
        meta = node.meta.get(SLOT_META)
        return meta if isinstance(meta, SlotView) else None
    return None


def _is_host(node: Any) -> bool:
    """Whether ``node`` is a host-arena slot view, or a view (permute, slice) of one."""
    while isinstance(node, fx.Node) and node.op == "call_function" and node.args:
        node = node.args[0]
    view = _slot_view(node)
    return view is not None and view.host


def _to_into(graph: fx.Graph, node: fx.Node, slot: fx.Node) -> None:
    with graph.inserting_before(node):
        call = graph.call_function(into_op(node.target), node.args, dict(node.kwargs))
    call.meta[SLOT_META] = node.meta.get(SLOT_META)
    node.replace_all_uses_with(slot)
    graph.erase_node(node)


def _to_copy(graph: fx.Graph, node: fx.Node, slot: fx.Node, functional: Any) -> None:
    node.target = functional
    node.kwargs = {k: v for k, v in node.kwargs.items() if k != "out"}
    with graph.inserting_after(node):
        copy = graph.call_function(aten.copy_.default, (slot, node))
    copy.meta["val"] = slot.meta.get("val")
    copy.meta[SLOT_META] = node.meta.get(SLOT_META)
    node.replace_all_uses_with(copy, delete_user_cb=lambda user: user is not copy)


def _to_offload(graph: fx.Graph, node: fx.Node) -> None:
    with graph.inserting_before(node):
        call = graph.call_function(offload_copy, (node.args[1], node.args[0]))
    call.meta[SLOT_META] = node.meta.get(SLOT_META)
    node.replace_all_uses_with(node.args[0])
    graph.erase_node(node)
