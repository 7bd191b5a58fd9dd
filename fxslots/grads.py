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
from typing import Any, Callable

import torch
import torch.fx as fx

from . import kernels
from .errors import UnsupportedGraphError
from .fallback import go_without
from .options import Options
from .costs import allocated_bytes, value_bytes
from .passes.accumulate import accumulate_grads, flush_bytes_for
from .passes.deliver import deliver_outputs, deliverable, fresh_outputs
from .passes.observe import failure_reason, observe
from .geometry import span_elements
from .overlay import END, NEVER, Overlay, warm_up_peaks
from .passes.borrow import borrow_arena, borrowable, reinplace, reinplaceable
from .passes.lifetimes import allocated_peak, read_lifetimes
from .runtime.layout import STAGED, layout_of, pack, view_runs
from .runtime.variant import Accumulate, Deliver
from .schemas import ArenaPlan, SavedSet, Write

log = logging.getLogger(__name__)


def accumulate(bw: fx.GraphModule, static: list[int], options: Options, example_inputs: Any,
               what: str, graphs: bool = False) -> Accumulate | None:
    """The backward that adds the gradients of parameters (static inputs) into their .grad
    buffers itself, or None (no parameter gets a gradient, or options say autograd does it);
    ``graphs``: with the form a CUDA graph captures."""
    return _or_without(lambda: _accumulate(bw, static, options, example_inputs, what, graphs),
                       f"the accumulating twin of the {what}", "autograd adds its gradients",
                       options)


def deliver(bw: fx.GraphModule, static: list[int], variant: Any, options: Options,
            example_inputs: Any, what: str, saved: SavedSet) -> Deliver | None:
    """The backward that writes parameters' gradients (of the static inputs) into the output
    buffer, or None (none can be); with what placing them in the slot's arena needs."""
    d = _or_without(lambda: _deliver(bw, static, variant.device, options, example_inputs, what),
                    f"the delivering twin of the {what}",
                    "its gradients are copied out of the pool", options)
    if d is None:
        return None
    return _with_overlay(_with_warm_up(d, bw, variant.accumulate, options), saved, variant.plan,
                         options)


def deliver_forward(fw: fx.GraphModule, n: int, device: torch.device, options: Options,
                    what: str) -> Deliver | None:
    """The forward (of variant ``what``) that writes its large user outputs (among its first
    ``n``) into its slot's output buffer, or None: none can be, or Inductor's code runs it."""
    if options.kernels != "aten":
        return None
    return _or_without(lambda: _deliver_forward(fw, n, device, options.alignment),
                       f"the delivering twin of the forward of {what}",
                       "its outputs are copied out of the pool", options)


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
    if d.kernel is not None or accumulate is None:
        return d
    lower = _or_without(lambda: _warm_up_is_lower(d, bw, accumulate.indices),
                        "estimating the warm-up's peak", "its gradients are copied after it",
                        options)
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


def _with_overlay(d: Deliver, saved: SavedSet, plan: ArenaPlan, options: Options) -> Deliver:
    """``d`` with what placing its gradients in the slot's arena needs (``fxslots.overlay``),
    and its temporaries too where they find bytes there; or ``d`` as it was: Inductor's code,
    the option off, or the analysis failing."""
    if d.kernel is not None or not options.grads_in_arena:
        return d
    made = _or_without(lambda: _overlay(d.graph, d, saved, plan), "placing gradients in the arena",
                       "they go to the output buffer", options)
    if made is None:
        return d
    borrowed = _or_without(lambda: _with_temporaries(made, d, saved, plan, options.alignment),
                           "placing the backward's temporaries in the arena",
                           "they stay in the pool", options)
    return dataclasses.replace(d, overlay=borrowed or made)


def _overlay(gm: fx.GraphModule, d: Deliver, saved: SavedSet, plan: ArenaPlan) -> Overlay:
    """What ``gm`` (``d``'s graph, or a twin of it with the same nodes) reads and writes."""
    reads, writes = read_lifetimes(gm, len(d.outputs))
    staged = {p.group for p in plan.placements if p.write is Write.STAGED}
    by_group: dict[int, int] = {}
    for t in saved.tensors:
        at = reads[t.backward_index] if 0 <= t.backward_index < len(reads) else END
        g = STAGED if t.group in staged else t.group
        by_group[g] = max(by_group.get(g, NEVER), at)
    nbytes = tuple(int(span_elements(shape, stride)) * dtype.itemsize
                   for dtype, _, shape, stride in d.geometry)
    return Overlay(by_group, writes, nbytes)


def _with_temporaries(ov: Overlay, d: Deliver, saved: SavedSet, plan: ArenaPlan,
                      alignment: int) -> Overlay:
    """``ov`` with the backward's temporaries that can live in arena bytes at the plan's one
    shape (``passes/borrow.py``): pointwise results computed over a saved input they read
    last, then the temporaries that find bytes the backward has finished reading, and the
    graph that computes them there; a plan of symbolic shapes keeps its temporaries in the
    pool (their bytes, and the holes, change with the shape)."""
    if plan.capacity.free_symbols:
        return ov
    inplace = reinplaceable(d.graph, _arena_groups(d, saved, plan))
    base = observe("reinplace", reinplace, d.graph, inplace,
                   summary=lambda g: f"{len(inplace)} pointwise results computed over the saved "
                                     f"input they read last") if inplace else d.graph
    found = borrowable(base)
    if not found and not inplace:
        return ov
    if inplace:  # its results' readers read their inputs' groups
        ov = _overlay(base, d, saved, plan)
    layout = layout_of(plan, {})
    trial = dataclasses.replace(ov, temps=tuple(found), graph=base, inplace=tuple(inplace))
    _, _, at = trial.place_at(layout.groups, layout.nbytes, alignment)
    temps = [t for t, off in zip(found, at, strict=True) if off is not None]
    if not temps:
        return dataclasses.replace(trial, temps=()) if inplace else ov
    twin = observe("borrow_arena", borrow_arena, base, temps,
                   summary=lambda g: f"{len(temps)} of {len(found)} temporaries "
                                     f"({sum(t.nbytes for t in temps)} bytes) computed into "
                                     f"arena bytes the backward has finished reading")
    return dataclasses.replace(trial, temps=tuple(temps), graph=twin)


def _arena_groups(d: Deliver, saved: SavedSet, plan: ArenaPlan) -> list[int | None]:
    """Per argument placeholder of ``d``'s graph: the storage group whose own slot bytes it
    reads, or None (a parameter, an input, a staged or offloaded value, not a saved tensor)."""
    n_args = len(list(d.graph.graph.find_nodes(op="placeholder"))) - len(d.outputs)
    owns = {p.group for p in plan.placements if p.write.owns_bytes}
    groups: list[int | None] = [None] * n_args
    for t in saved.tensors:
        if 0 <= t.backward_index < n_args and t.group in owns:
            groups[t.backward_index] = t.group
    return groups


def _or_without(make: Callable[[], Any], what: str, instead: str, options: Options) -> Any:
    """``make()``, or None, with a warning naming ``what`` and the cause, when it fails: these
    graphs only spare work the plain backward does anyway; one must never stop training."""
    try:
        return make()
    except UnsupportedGraphError:  # strict=True, from inside: raised already
        raise
    except Exception as e:  # noqa: BLE001 - a pass failing on a graph it did not foresee
        go_without(f"{what}: {failure_reason(e)}; {instead}", options.strict)
        return None


def _accumulate(bw: fx.GraphModule, static: list[int], options: Options, example_inputs: Any,
                what: str, graphs: bool) -> Accumulate | None:
    if options.grad_accumulation not in ("graph", "fused"):
        return None
    outs = list(next(iter(bw.graph.find_nodes(op="output"))).args[0])
    params = tuple(i for i in sorted(static) if i < len(outs) and isinstance(outs[i], fx.Node))
    if not params:
        return None
    acc = Accumulate(params, observe("accumulate_grads", accumulate_grads, bw, list(params),
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
                       fuse, summary=lambda g: f"captured: gradients added every {flush} bytes"
                       + (f", {_fused(g)} by their matrix product" if fuse else ""))
    return dataclasses.replace(acc, captured=captured)


def _fused(gm: fx.GraphModule) -> int:
    return len(gm.graph.find_nodes(op="call_function", target=torch.ops.aten.addmm_.default))


def _deliver(bw: fx.GraphModule, static: list[int], device: torch.device, options: Options,
             example_inputs: Any, what: str) -> Deliver | None:
    outputs = deliverable(bw, device, static)
    if not outputs:
        return None
    inductor = options.kernels == "inductor"
    gm, delivered = observe(
        "deliver_grads", deliver_outputs, bw, outputs, kernels.runs_as_call if inductor else None,
        summary=lambda r: f"{len(r[1])} gradients written into the output buffer in the graph "
                          f"({sum(d.in_place for d in r[1])} by their producer)")
    d = _delivering(outputs, gm, delivered, options.alignment)
    if inductor:
        d = kernels.compile_twin(d, example_inputs, f"the delivering {what}", options,
                                 "the backward's gradients are copied out of the pool instead")
        if d.kernel is None:  # its ATen graph would run slower kernels than the plain one's
            return None
    return d
