"""Unalias: a backward output that shares bytes with a saved tensor in the slot gets its own.

A backward may return a saved tensor, or a view of one, as a gradient (a custom
``autograd.Function`` whose input's gradient is a value it saved). The slot is given back when
the backward returns and the next forward writes it, so such a gradient (an ``x.grad`` the
caller keeps) would change under the caller. This pass returns a ``clone`` of it instead (one
copy, of what only such graphs return); the ATen and Inductor forms, the delivering and
accumulating twins are all made from the graph it leaves.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from ..schemas import SLOT_META, ArenaPlan, SavedSet, Write
from .lifetimes import may_return_alias

aten = torch.ops.aten


def unalias_outputs(bw: fx.GraphModule, saved: SavedSet, plan: ArenaPlan) -> int:
    """Clone each output of ``bw`` that may view a backward argument the slot (or its host
    arena) holds; returns how many. Rewrites ``bw`` in place."""
    in_slot = {t.backward_index for t in saved.tensors
               if t.backward_index >= 0 and plan.placement(t.group).write is not Write.NONE}
    placeholders = list(bw.graph.find_nodes(op="placeholder"))
    slotted = {placeholders[i] for i in in_slot if i < len(placeholders)}
    output = next(iter(bw.graph.find_nodes(op="output")))
    outs, n = list(output.args[0]), 0
    for k, o in enumerate(outs):
        if isinstance(o, fx.Node) and _views_any(o, slotted):
            with bw.graph.inserting_before(output):
                outs[k] = bw.graph.call_function(aten.clone.default, (o,))
            outs[k].meta["val"] = o.meta.get("val")
            outs[k].meta[SLOT_META] = "a copy: the value it returns views the slot"
            n += 1
    if n:
        output.args = (tuple(outs),)
        bw.graph.lint()
        bw.recompile()
    return n


def _views_any(node: fx.Node, targets: set[fx.Node]) -> bool:
    """Whether ``node`` is one of ``targets`` or may view one (through alias-returning ops)."""
    stack, seen = [node], {node}
    while stack:
        n = stack.pop()
        if n in targets:
            return True
        if n.op == "call_function" and may_return_alias(n.target):
            for a in n.all_input_nodes:
                if a not in seen:
                    seen.add(a)
                    stack.append(a)
    return False
