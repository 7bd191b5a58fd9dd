"""How a variant hands its results over: the graphs besides the plain forward and backward.

- ``accumulate``: with persistent ``.grad`` buffers, the backward adds parameter gradients into
  them itself (``passes/accumulate.py``);
- ``deliver``: under CUDA graphs, the backward writes the gradients it returns into the region's
  output buffer itself, outside the pool (``passes/deliver.py``), instead of their being copied
  there after each replay;
- ``deliver_forward``: the same for a forward's large outputs, into its slot's output buffer.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from typing import Any

import torch
import torch.fx as fx

from . import in_arena, kernels
from .fallback import or_without
from .options import Options
from .costs import allocated_bytes, value_bytes
from .passes.accumulate import accumulate_grads, flush_bytes_for
from .passes.deliver import deliver_outputs, deliverable, fresh_outputs
from .passes.observe import observe
from .overlay import warm_up_peaks
from .passes.lifetimes import allocated_peak
from .runtime.layout import pack, view_runs
from .runtime.variant import Accumulate, Deliver
from .schemas import SLOT_META, SavedSet

log = logging.getLogger(__name__)


def accumulate(bw: fx.GraphModule, static: list[int], options: Options, example_inputs: Any,
               what: str, graphs: bool = False, fw: fx.GraphModule | None = None
               ) -> Accumulate | None:
    """The backward that adds the gradients of parameters (static inputs) into their .grad
    buffers itself, or None (no parameter gets a gradient, or options say autograd does it);
    ``graphs``: with the form a CUDA graph captures; ``fw``: the forward, whose inputs give
    the buffers their parameters' layout."""
    inputs = [] if fw is None else [p.meta.get("val") for p in fw.graph.find_nodes(
        op="placeholder") if SLOT_META not in p.meta]  # not the slot views it takes last
    return or_without(lambda: _accumulate(bw, static, options, example_inputs, what, graphs,
                                          inputs),
                      f"the accumulating twin of the {what}", "autograd adds its gradients",
                      options.strict)


def deliver(bw: fx.GraphModule, static: list[int], variant: Any, options: Options,
            example_inputs: Any, what: str, saved: SavedSet) -> Deliver | None:
    """The backward that writes parameters' gradients (of the static inputs) into the output
    buffer, or None (none can be); with what placing them in the slot's arena needs."""
    d = or_without(lambda: _deliver(bw, static, variant.device, options),
                   f"the delivering twin of the {what}",
                   "its gradients are copied out of the pool", options.strict)
    if d is None:
        return None
    if options.kernels == "inductor":
        fencing = or_without(lambda: in_arena.fencing(d, saved, variant.plan, options),
                             "placing gradients in the arena", "they go to the output buffer",
                             options.strict)
        return _compiled(d, fencing, example_inputs, what, options)
    d = _with_warm_up(d, bw, variant.accumulate, options)
    return in_arena.with_overlay(d, saved, variant.plan, options, variant.binder.hints)


def deliver_forward(fw: fx.GraphModule, n: int, device: torch.device, options: Options,
                    what: str) -> Deliver | None:
    """The forward (of variant ``what``) that writes its large user outputs (among its first
    ``n``) into its slot's output buffer, or None: none can be, or Inductor's code runs it."""
    if options.kernels != "aten":
        return None
    return or_without(lambda: _deliver_forward(fw, n, device, options.alignment),
                      f"the delivering twin of the forward of {what}",
                      "its outputs are copied out of the pool", options.strict)


def _deliver_forward(fw: fx.GraphModule, n: int, device: torch.device, alignment: int
                     ) -> Deliver | None:
    outputs = fresh_outputs(fw, device, n)
    if not outputs:
        return None
    gm, delivered = observe(
        "deliver_outputs", deliver_outputs, fw, outputs, None, "out", "output",
        summary=lambda r: f"{len(r[1])} outputs written into the slot's output buffer in the "
                          f"graph ({sum(d.in_place for d in r[1])} by their producer)")
    return _delivering(outputs, gm, delivered, alignment)


def _delivering(outputs: list[int], gm: fx.GraphModule, delivered: Any, alignment: int
                ) -> Deliver:
    geometry, nbytes = pack([(d.dtype, d.shape, d.stride) for d in delivered], alignment)
    return Deliver(tuple(outputs), tuple(geometry), nbytes, gm,
                   in_place=sum(x.in_place for x in delivered), runs=view_runs(geometry))


def _with_warm_up(d: Deliver, bw: fx.GraphModule, accumulate: Accumulate | None,
                  options: Options) -> Deliver:
    """``d``, told whether its warm-up should compute the gradients autograd may keep into
    their buffer, where that peaks lower (``overlay.warm_up_peaks``); ATen's twin only
    (Inductor's warms up delivering into the output buffer anyway)."""
    if accumulate is None:
        return d
    lower = or_without(lambda: _warm_up_is_lower(d, bw, accumulate.indices),
                       "estimating the warm-up's peak", "its gradients are copied after it",
                       options.strict)
    return dataclasses.replace(d, warm_up=bool(lower))


def _warm_up_is_lower(d: Deliver, bw: fx.GraphModule, kept: tuple[int, ...]) -> bool:
    outs = list(next(iter(bw.graph.find_nodes(op="output"))).args[0])
    sizes = {i: allocated_bytes(outs[i]) for i in kept
             if i < len(outs) and isinstance(outs[i], fx.Node)}
    undelivered = sum(b for i, b in sizes.items() if i not in d.outputs)
    kept_bytes = sum(sizes.values())
    copied_after, delivering = warm_up_peaks(allocated_peak(bw), allocated_peak(d.graph),
                                             kept_bytes, undelivered, d.nbytes)
    lower = delivering < copied_after
    log.info("warm-up peak, estimated: %d bytes copying %d bytes of gradients after it, %d "
             "computing them into their buffer: %s", copied_after, kept_bytes, delivering,
             "delivering" if lower else "copying after")
    return lower


def _accumulate(bw: fx.GraphModule, static: list[int], options: Options, example_inputs: Any,
                what: str, graphs: bool, inputs: list[Any]) -> Accumulate | None:
    if options.grad_accumulation not in ("graph", "fused"):
        return None
    outs = list(next(iter(bw.graph.find_nodes(op="output"))).args[0])
    params = tuple(i for i in sorted(static) if i < len(outs) and isinstance(outs[i], fx.Node))
    if not params:
        return None
    lead = len(inputs) - len(outs)  # effect tokens come first in the forward's inputs only
    values = [inputs[i + lead] if lead >= 0 else None for i in params]
    acc = Accumulate(params, observe("accumulate_grads", accumulate_grads, bw, list(params),
                                     params=values,
                                     summary=lambda g: f"{len(params)} gradients added in "
                                                       f"the graph when .grad exists"))
    if options.kernels == "inductor":  # Inductor orders (and may fuse) the adds itself
        if options.grad_accumulation == "fused":
            warnings.warn("fxslots: grad_accumulation=\"fused\" adds gradients as \"graph\" does "
                          "under kernels=\"inductor\" (the GEMM that adds them is built into "
                          "ATen graphs); set kernels=\"aten\" for it", stacklevel=2)
        return kernels.compile_twin(acc, example_inputs, f"the accumulating {what}", options,
                                    lazily=True)
    if not graphs:
        return acc
    flush = flush_bytes_for(sum(value_bytes(outs[i]) for i in params))
    fuse = options.grad_accumulation == "fused"
    captured = observe("accumulate_grads_in_groups", accumulate_grads, bw, list(params), flush,
                       fuse, values,
                       summary=lambda g: f"captured: gradients added every {flush} bytes"
                       + (f", {_fused(g)} by their matrix product" if fuse else ""))
    return dataclasses.replace(acc, captured=captured)


def _fused(gm: fx.GraphModule) -> int:
    return len(gm.graph.find_nodes(op="call_function", target=torch.ops.aten.addmm_.default))


def _deliver(bw: fx.GraphModule, static: list[int], device: torch.device, options: Options
             ) -> Deliver | None:
    outputs = deliverable(bw, device, static)
    if not outputs:
        return None
    inductor = options.kernels == "inductor"
    gm, delivered = observe(
        "deliver_grads", deliver_outputs, bw, outputs, kernels.runs_as_call if inductor else None,
        summary=lambda r: f"{len(r[1])} gradients written into the output buffer in the graph "
                          f"({sum(d.in_place for d in r[1])} by their producer)")
    return _delivering(outputs, gm, delivered, options.alignment)


def _compiled(d: Deliver, fencing: Any, example_inputs: Any, what: str, options: Options
              ) -> Deliver | None:
    """``d`` with Inductor's code, fenced (``in_arena.Fencing``) so that its gradients may go
    into the arena; where Inductor refuses the fenced graph, unfenced (they keep the output
    buffer); None where it refuses that too: its ATen graph would run slower kernels than the
    plain backward's."""
    if fencing is not None:
        fenced = kernels.compile_twin(d, example_inputs, f"the delivering {what} (fenced)",
                                      options, "its gradients keep the output buffer instead",
                                      last_pass=fencing)
        if fenced.kernel is not None:
            return dataclasses.replace(fenced, overlay=fencing.overlay)
    d = kernels.compile_twin(d, example_inputs, f"the delivering {what}", options,
                             "the backward's gradients are copied out of the pool instead")
    return d if d.kernel is not None else None


def unlinked_inputs(forward: fx.GraphModule, backward: fx.GraphModule, user_outputs: int) -> int:
    """How many of the forward's inputs that get a gradient it does not save as themselves (it
    saves values computed from them, such as a weight's transpose, or copies them into its
    slot): AOTAutograd links the gradients of a ``create_graph=True`` backward only to inputs
    saved as they are (``Variant.backward`` warns)."""
    grads = backward.graph.output_node().args[0]
    inputs = list(forward.graph.find_nodes(op="placeholder"))[:len(grads)]
    saved = set(forward.graph.output_node().args[0][user_outputs:])
    return sum(g is not None and p not in saved for p, g in zip(inputs, grads, strict=True))
