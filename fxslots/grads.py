"""How a variant's backward hands its gradients over: the graphs besides the plain backward.

- ``accumulate``: with persistent ``.grad`` buffers, the backward adds parameter gradients into
  them itself (``passes/accumulate.py``);
- ``deliver``: under CUDA graphs, the backward writes the gradients it returns into the region's
  output buffer itself, outside the pool (``passes/deliver.py``), instead of their being copied
  there after each replay.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from . import kernels
from .options import Options
from .passes.accumulate import accumulate_grads
from .passes.deliver import deliver_grads, deliverable
from .passes.observe import observe
from .runtime.layout import pack, view_runs
from .runtime.variant import Accumulate, Deliver


def accumulate(bw: fx.GraphModule, static: list[int], options: Options, example_inputs: Any,
               what: str) -> Accumulate | None:
    """The backward that adds the gradients of parameters (static inputs) into their .grad
    buffers itself, or None (no parameter gets a gradient, or options say autograd does it)."""
    if options.grad_accumulation != "graph":
        return None
    outs = list(next(iter(bw.graph.find_nodes(op="output"))).args[0])
    params = tuple(i for i in sorted(static) if i < len(outs) and isinstance(outs[i], fx.Node))
    if not params:
        return None
    acc = Accumulate(params, observe("accumulate_grads", accumulate_grads, bw, list(params),
                                     summary=lambda g: f"{len(params)} gradients added in "
                                                       f"the graph when .grad exists"))
    if options.kernels == "inductor":
        acc = kernels.compile_accumulate(acc, example_inputs, f"the accumulating {what}", options)
    return acc


def deliver(bw: fx.GraphModule, static: list[int], device: torch.device, options: Options,
            example_inputs: Any, what: str) -> Deliver | None:
    """The backward that writes parameters' gradients (of the static inputs) into the output
    buffer, or None (none can be)."""
    outputs = deliverable(bw, device, static)
    if not outputs:
        return None
    inductor = options.kernels == "inductor"
    gm, delivered = observe(
        "deliver_grads", deliver_grads, bw, outputs, kernels.runs_as_call if inductor else None,
        summary=lambda r: f"{len(r[1])} gradients written into the output buffer in the graph "
                          f"({sum(d.in_place for d in r[1])} by their producer)")
    geometry, nbytes = pack([(d.dtype, d.shape, d.stride) for d in delivered], options.alignment)
    d = Deliver(tuple(outputs), tuple(geometry), nbytes, gm,
                in_place=sum(x.in_place for x in delivered), runs=view_runs(geometry))
    if inductor:
        d = kernels.compile_deliver(d, example_inputs, f"the delivering {what}", options)
    return d
