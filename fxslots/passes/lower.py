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
- side-stream copies (offload: ``streams.offload``/``offload_wait`` in the forward,
  ``streams.reload``/``reload_wait`` in the backward) become ``fxslots::offload_start``/
  ``offload_join`` and ``fxslots::reload``/``reload_join`` (``lower_streams``, for every graph);
- device copies the plan chose stay ``copy_``.

Which slot writes Inductor's kernels really make in place is read from its generated code
afterwards (``passes/audit.py``), not assumed from this graph.
"""

from __future__ import annotations

from typing import Any, Callable

import operator

import torch
import torch.fx as fx

from .. import _torch, ops, streams
from ..schemas import SlotView
from ..schemas import SLOT_META, expr
from .expand import EXPANDED_FROM

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
        if _slot_view(slot) is None and (base := _viewed_slot(slot)) is not None:
            _unexpand(graph, node, slot, base)
        elif _slot_view(slot) is not None:
            functional = functional_of(node.target)
            # No functional form (an out-variant fxslots registers for a custom op, such as
            # transformers' grouped MoE matmul): Inductor would call it anyway; it writes.
            if functional is None or extern(functional):
                _to_into(graph, node, slot)
            else:
                _to_copy(graph, node, slot, functional)
        elif node.target is aten.copy_.default and _slot_view(node.args[0]) is not None:
            _read_from_slot(node)
    lower_streams(gm)
    return gm


def lower_streams(gm: fx.GraphModule) -> int:
    """Replace ``fxslots.streams``' functions in ``gm`` by operators Inductor keeps (in place);
    returns how many side-stream copies were replaced."""
    graph = gm.graph
    n = 0
    for node in list(graph.nodes):
        if node.target is streams.offload:
            _offload(graph, node)
            n += 1
        elif node.target is streams.reload:
            _reload(graph, node)
            n += 1
    graph.lint()
    gm.recompile()
    return n


def functional_of(out_overload: Any) -> Any:
    """The overload of the same op that takes the arguments of ``out_overload`` but its out=
    one, and returns a fresh tensor (``aten.mm.out`` -> ``aten.mm.default``); or None."""
    want = [(a.name, str(a.type)) for a in _torch.op_schema(out_overload).arguments
            if not a.is_out]
    packet = out_overload.overloadpacket
    for name in packet.overloads():
        cand = getattr(packet, name)
        schema = _torch.op_schema(cand)
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


def _viewed_slot(node: Any) -> fx.Node | None:
    """The slot placeholder ``node`` is a ``view`` of, or None."""
    if isinstance(node, fx.Node) and node.target is aten.view.default:
        return node.args[0] if _slot_view(node.args[0]) is not None else None
    return None


def _unexpand(graph: fx.Graph, node: fx.Node, out: fx.Node, slot: fx.Node) -> None:
    """An expansion whose out= is a view of the slot (``embedding`` as ``index_select.out``):
    the op it expanded, then ``copy_`` into the slot, which its readers read. Inductor then
    stores the op's value into the slot from the kernel that computes it."""
    original = node.meta.get(EXPANDED_FROM)
    if original is None or len(_torch.op_schema(original[0]).returns) != 1:
        raise NotLowerable(f"{node.name} ({node.target}) writes a view of slot {slot.name}")
    expanded_args = node.all_input_nodes
    # The meta is shared with the graph this one copies: its nodes are found here by name.
    here = {n.name: n for n in graph.nodes}
    target, args, kwargs = fx.node.map_arg(original, lambda a: here[a.name])
    node.target, node.args, node.kwargs = target, args, kwargs
    if _layout(node.meta["val"])[0] != _layout(slot.meta["val"])[0]:
        raise NotLowerable(f"{node.name} ({node.target}) does not have the shape of {slot.name}")
    with graph.inserting_after(node):
        copy = graph.call_function(aten.copy_.default, (slot, node))
    copy.meta["val"] = slot.meta.get("val")
    copy.meta[SLOT_META] = node.meta.get(SLOT_META)
    slot.replace_all_uses_with(copy, delete_user_cb=lambda user: user not in (copy, out))
    for dead in dict.fromkeys([out, *expanded_args]):  # the expansion's own view and index reshape
        if not dead.users and dead.op == "call_function":
            graph.erase_node(dead)


def _read_from_slot(copy: fx.Node) -> None:
    """A copy the plan chose (``copy_(slot, value)``; a dtype cast, say, has no out= form):
    the value's later readers read the slot, so Inductor stores the value there from the
    kernel that computes it and keeps no buffer of its own beside it. The graph's outputs keep
    the value: a user output the plan copied never aliases its slot."""
    slot, value = copy.args[0], copy.args[1]
    got, want = value.meta.get("val"), slot.meta.get("val")
    if not (isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor)
            and got.dtype == want.dtype and _layout(got) == _layout(want)):
        return  # a cast, or another layout: its readers keep the value (views of it assume it)
    before = set()  # readers between the value and its copy keep the value
    n = value.next
    while n is not copy:
        before.add(n)
        n = n.next
    value.replace_all_uses_with(copy, delete_user_cb=lambda user: (
        user is not copy and user.op != "output" and user not in before))


def _layout(t: torch.Tensor) -> tuple:
    """Sizes and strides as expressions: compared structurally, so no shape guard is added."""
    return tuple(map(expr, t.shape)), tuple(map(expr, t.stride()))


def _to_into(graph: fx.Graph, node: fx.Node, slot: fx.Node) -> None:
    with graph.inserting_before(node):
        call = graph.call_function(ops.into_op(node.target), node.args, dict(node.kwargs))
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


def _offload(graph: fx.Graph, node: fx.Node) -> None:
    """``offload(host, value)`` -> event, joined by ``offload_wait(value, event)``."""
    host, value = node.args
    with graph.inserting_before(node):
        start = graph.call_function(ops.offload_start, (value, host))
    start.meta[SLOT_META] = node.meta.get(SLOT_META)
    for wait in list(node.users):
        with graph.inserting_before(wait):
            join = graph.call_function(ops.offload_join, (value, host))
        join.meta[SLOT_META] = _own_join(wait)
        graph.erase_node(wait)
    graph.erase_node(node)


def _reload(graph: fx.Graph, node: fx.Node) -> None:
    """``reload(device, *members)`` -> handle; ``reload_wait(handle)`` -> members, read
    through ``getitem``. Members that share bytes (a saved tensor and a view of it) become
    ``as_strided`` views of one reloaded span, so that Inductor knows they alias; where their
    geometry is symbolic, each is reloaded on its own (its bytes move once per member)."""
    device, *members = node.args
    vals = [m.meta.get("val") for m in members]
    spans = _spans(vals) if len(members) > 1 else None
    with graph.inserting_before(node):
        if spans is not None:
            gots = [graph.call_function(ops.reload_span, (list(members), device))]
            views = [graph.call_function(aten.as_strided.default, (gots[0], *g)) for g in spans]
            joins = [gots]
        else:
            gots = [graph.call_function(ops.reload, ([m], device)) for m in members]
            views = [graph.call_function(operator.getitem, (g, 0)) for g in gots]
            joins = [[v] for v in views]
    for got in gots:
        got.meta[SLOT_META] = node.meta.get(SLOT_META)
    if all(_torch.is_fake(v) for v in vals):  # the device-side views, for Inductor's passes
        _fake_reloads(gots, views, vals, spans, device)
    for ready in list(node.users):
        with graph.inserting_before(ready):
            for joined in joins:
                join = graph.call_function(ops.reload_join, (joined,))
                join.meta[SLOT_META] = _own_join(ready)
        for item in list(ready.users):
            item.replace_all_uses_with(views[item.args[1]])
            graph.erase_node(item)
        graph.erase_node(ready)
    graph.erase_node(node)


def _own_join(wait: fx.Node) -> Any:
    """A wait's note, for the join it becomes. Each copy is joined on its own here: a merged
    join that does not wait is safe only right after the one that does, an order Inductor's
    scheduler does not promise."""
    if wait.kwargs.get("wait", True):
        return wait.meta.get(SLOT_META)
    return "the compute stream joins this copy itself (under Inductor every join waits)"


def _spans(vals: list[Any]) -> list[tuple[list[int], list[int], int]] | None:
    """Each member's size, stride and offset in the span its group reloads into; None where
    any of them is symbolic (or a member has no fake value)."""
    if not all(_torch.is_fake(v) for v in vals):
        return None
    geo = [(list(v.shape), list(v.stride()), v.storage_offset()) for v in vals]
    if not all(isinstance(x, int) for size, stride, off in geo for x in (*size, *stride, off)):
        return None
    lo = min(off for *_, off in geo)
    return [(size, stride, off - lo) for size, stride, off in geo]


def _fake_reloads(gots: list[fx.Node], views: list[fx.Node], vals: list[Any],
                  spans: list[Any] | None, device: Any) -> None:
    with vals[0].fake_mode:
        if spans is not None:
            span = gots[0].meta["val"] = ops.reload_span(vals, device)
            for view, g in zip(views, spans, strict=True):
                view.meta["val"] = aten.as_strided.default(span, *g)
            return
        for got, view, val in zip(gots, views, vals, strict=True):
            got.meta["val"] = ops.reload([val], device)
            view.meta["val"] = got.meta["val"][0]
