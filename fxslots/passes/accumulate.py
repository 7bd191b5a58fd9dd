"""Accumulate: a backward graph that adds parameter gradients into the ``.grad`` buffers itself.

With persistent ``.grad`` buffers (gradient accumulation, ``zero_grad(set_to_none=False)``),
autograd adds every returned gradient into its buffer with one launch per parameter, outside any
captured graph. This pass makes a copy of the backward graph that takes those buffers as extra
placeholders (appended last, in ``outputs`` order), adds each gradient into its buffer right
after the node that produces it, and returns None in their place, so autograd has nothing left to
do. Right after, not in one multi-tensor add at the end: a gradient then dies as soon as it is
added, as under eager's AccumulateGrad, instead of every gradient of the model living at once at
the end of the backward (a second copy of the parameters' bytes in the graph's memory pool).
"""

from __future__ import annotations

import copy

import torch
import torch.fx as fx

from ..schemas import SLOT_META

aten = torch.ops.aten


def accumulate_grads(bw: fx.GraphModule, outputs: list[int]) -> fx.GraphModule:
    """A new backward graph that adds its outputs at ``outputs`` into buffers passed last."""
    gm = fx.GraphModule(bw, copy.deepcopy(bw.graph))
    graph = gm.graph
    output = next(iter(graph.find_nodes(op="output")))
    outs = list(output.args[0])
    last = list(graph.find_nodes(op="placeholder"))[-1]
    with graph.inserting_before(last.next):
        buffers = [graph.placeholder(f"grad_{i}") for i in outputs]
    for b, i in zip(buffers, outputs, strict=True):
        b.meta["val"] = outs[i].meta.get("val")
        b.meta[SLOT_META] = f"the .grad buffer of output {i}, added into in the graph"
    for b, i in zip(buffers, outputs, strict=True):
        grad = outs[i]
        # After the producer, and after every placeholder (a gradient may be an input).
        with graph.inserting_after(grad if grad.op != "placeholder" else buffers[-1]):
            add = graph.call_function(aten.add_.Tensor, (b, grad))
        add.meta[SLOT_META] = f"adds output {i} into its .grad buffer as soon as it exists"
    for i in outputs:
        outs[i] = None
    output.args = (tuple(outs),)
    graph.lint()
    gm.recompile()
    return gm
