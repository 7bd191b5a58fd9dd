"""Accumulate: a backward graph that adds parameter gradients into the ``.grad`` buffers itself.

With persistent ``.grad`` buffers (gradient accumulation, ``zero_grad(set_to_none=False)``),
autograd adds every returned gradient into its buffer with one launch per parameter, outside any
captured graph. This pass makes a copy of the backward graph that takes those buffers as extra
placeholders (appended last, in ``outputs`` order), adds into them with one multi-tensor
``_foreach_add_``, and returns None in their place, so autograd has nothing left to do.

One add at the end, not one after each gradient's producer: a backward that raises part-way
(an out-of-memory a training loop catches and skips) then adds nothing, as aot_eager's, which
hands autograd its gradients only when it returns. The price: every gradient lives in the
graph's memory at the end of the backward.
"""

from __future__ import annotations

import copy

import torch
import torch.fx as fx

from ..schemas import SLOT_META

aten = torch.ops.aten


def twin_with_buffers(bw: fx.GraphModule, outputs: list[int], prefix: str
                      ) -> tuple[fx.GraphModule, fx.Node, list, list[fx.Node]]:
    """A copy of ``bw`` with one placeholder ``<prefix>_<i>`` per output ``i`` in ``outputs``,
    after its own: the copy, its output node, its outputs (a list to edit) and the buffers."""
    gm = fx.GraphModule(bw, copy.deepcopy(bw.graph))
    graph = gm.graph
    output = next(iter(graph.find_nodes(op="output")))
    last = list(graph.find_nodes(op="placeholder"))[-1]
    with graph.inserting_before(last.next):
        buffers = [graph.placeholder(f"{prefix}_{i}") for i in outputs]
    return gm, output, list(output.args[0]), buffers


def accumulate_grads(bw: fx.GraphModule, outputs: list[int]) -> fx.GraphModule:
    """A new backward graph that adds its outputs at ``outputs`` into buffers passed last."""
    gm, output, outs, buffers = twin_with_buffers(bw, outputs, "grad")
    graph = gm.graph
    for b, i in zip(buffers, outputs, strict=True):
        b.meta["val"] = outs[i].meta.get("val")
        b.meta[SLOT_META] = f"the .grad buffer of output {i}, added into in the graph"
    with graph.inserting_before(output):
        add = graph.call_function(aten._foreach_add_.List, ([*buffers], [outs[i] for i in outputs]))
    add.meta[SLOT_META] = f"accumulates {len(outputs)} gradients into their .grad buffers"
    for i in outputs:
        outs[i] = None
    output.args = (tuple(outs),)
    graph.lint()
    gm.recompile()
    return gm
