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
- side-stream copies become operators Inductor keeps (``passes/lower_streams.py``, for every
  graph);
- device copies the plan chose stay ``copy_``.

Which slot writes Inductor's kernels really make in place is read from its generated code
afterwards (``passes/audit.py``), not assumed from this graph.
"""

from __future__ import annotations

from typing import Any, Callable

import operator

import torch
import torch.fx as fx

from .. import _torch, ops
from ..schemas import SlotView
from ..schemas import SLOT_META, expr
from ..routes import out_arguments, out_returns
from .expand import EXPANDED_FROM
from .lower_streams import lower_streams

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
        if _writes_several(node):
            _to_into_several(graph, node)
        elif _slot_view(slot) is None and (base := _viewed_slot(slot)) is not None:
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


def _writes_several(node: fx.Node) -> bool:
    """One of fxslots' own out overloads with several out= arguments, some of them slots (its
    attention forward: output, logsumexp, seed and offset), whose kernels write given memory
    as given. Others are left as they are: ATen's (``topk.values``, ``sort`` in Mixtral's
    router) Inductor takes itself, and as one call it could not see the output ``sort``
    resizes (Mixtral's gradients were wrong); another library's may resize or restride."""
    if not isinstance(node.target, _torch.OpOverload) or node.target.namespace != "fxslots":
        return False
    names = out_arguments(node.target)
    return len(names) > 1 and any(_slot_view(node.kwargs.get(n)) is not None for n in names)


def _to_into_several(graph: fx.Graph, node: fx.Node) -> None:
    """``fxslots::<op>_into`` writes every out= argument (slots, and scratch for the outputs
    nobody saves) and returns nothing, which Inductor calls as it is: returning them, the op
    was one it could not lower ("Can't generate FallbackKernel", H200 run 37f). Each value
    the op returned is then read where it was written; a size it returned, from the input of
    that size."""
    op = node.target
    written = {k: node.kwargs[name] for name, k in
               zip(out_arguments(op), out_returns(op), strict=True)}
    with graph.inserting_before(node):
        call = graph.call_function(ops.into_op(op), node.args, dict(node.kwargs))
    call.meta[SLOT_META] = node.meta.get(SLOT_META)
    for item in list(node.users):
        if item.target is not operator.getitem:
            raise NotLowerable(f"{item.name} reads all of {node.name} ({op})")
        k = item.args[1]
        if k in written:
            _check_read_as_written(node, item, written[k])
            item.replace_all_uses_with(written[k])
        elif item.users:
            with graph.inserting_before(node):
                value = _returned_size(graph, node, node.meta["val"][k])
            for user in list(item.users):
                user.replace_input_with(item, value)
        graph.erase_node(item)
    graph.erase_node(node)


def _check_read_as_written(node: fx.Node, item: fx.Node, written: fx.Node) -> None:
    """A value read where the op wrote it must have the layout Inductor sees there: a slot, or
    scratch of the exact layout; scratch of symbolic size is an empty tensor the op resizes,
    unseen by Inductor (``rewrite._scratch``)."""
    if (item.users and _slot_view(written) is None
            and written.target is not aten.empty_strided.default):
        raise NotLowerable(f"{item.name} is output {item.args[1]} of {node.name} ({node.target}),"
                           f" written into {written.name}, which the op resizes")


def _returned_size(graph: fx.Graph, node: fx.Node, val: Any) -> Any:
    """A value ``node`` returns beside its out= tensors: an int or None as it is; a symbolic
    size (cuDNN attention's sequence lengths) as that size of the input that has it."""
    if val is None or isinstance(val, int):
        return val
    if not isinstance(val, torch.SymInt):
        raise NotLowerable(f"{node.name} ({node.target}) returns {val}, not a size")
    want = expr(val)
    for arg in node.all_input_nodes:
        t = arg.meta.get("val")
        for d, size in enumerate(t.shape if isinstance(t, torch.Tensor) else ()):
            if expr(size) == want:
                size_node = graph.call_function(aten.sym_size.int, (arg, d))
                size_node.meta["val"] = size
                return size_node
    raise NotLowerable(f"{node.name} ({node.target}) returns {val}, which no input's size is")


def _to_copy(graph: fx.Graph, node: fx.Node, slot: fx.Node, functional: Any) -> None:
    node.target = functional
    node.kwargs = {k: v for k, v in node.kwargs.items() if k != "out"}
    with graph.inserting_after(node):
        copy = graph.call_function(aten.copy_.default, (slot, node))
    copy.meta["val"] = slot.meta.get("val")
    copy.meta[SLOT_META] = node.meta.get(SLOT_META)
    node.replace_all_uses_with(copy, delete_user_cb=lambda user: user is not copy)
