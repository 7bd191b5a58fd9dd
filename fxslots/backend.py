"""The ``fxslots`` torch.compile backend: AOTAutograd, then the slot passes, then the runtime.

Registered through the ``torch_dynamo_backends`` entry point (pyproject.toml) only.
"""

from __future__ import annotations

import logging
import weakref
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.fx as fx

from . import _torch
from .errors import OptionsError, UnsupportedGraphError
from .options import Options
from .passes import (
    collect_saved,
    observe,
    plan_arena,
    annotate_backward,
    backward_slot_args,
    collect_inputs,
    failure_reason,
    snapshot,
    rewrite_forward,
    tag_recompute,
    unplaceable_reason,
    verify_forward,
)
from .policies import PARTITIONERS, RECOMPUTE, choose_offload
from .printing import format_graph
from .runtime import EagerExecutor, SlotRing, SymbolBinder, Variant, boxed, warn_fallback
from .schemas import ArenaPlan, SavedSet

log = logging.getLogger(__name__)

counters: Counter = Counter()
"""Process-wide event counts: compiles, fallbacks, captures (read them in tests and benchmarks)."""

_rings: dict[tuple, SlotRing] = {}
_recorders: list[list["CompiledGraphs"]] = []


@dataclass
class CompiledGraphs:
    """What one compile produced, kept for ``explain`` and the structured trace."""

    variant: Variant | None
    saved: SavedSet | None
    plan: ArenaPlan | None
    forward_before: str
    forward_after: str
    backward: str = ""
    fallback: str | None = None


def fxslots_backend(gm: fx.GraphModule, example_inputs: list[Any], *,
                    options: dict[str, Any] | Options | None = None,
                    mode: str | None = None) -> Callable[..., Any]:
    """``torch.compile(model, backend="fxslots", options={...})``."""
    if mode is not None:
        raise OptionsError(
            f"fxslots takes no mode= (got {mode!r}); configure it through options={{...}}")
    opts = Options.parse(options)
    counters["compiles"] += 1
    compiler = _Compiler(opts, _ring_for(opts, options))
    return _torch.aot_autograd(
        fw_compiler=compiler.compile_forward,
        bw_compiler=compiler.compile_backward,
        inference_compiler=compiler.compile_inference,
        partition_fn=compiler.partition,
        keep_inference_input_mutations=True,
    )(gm, example_inputs)


def _ring_for(opts: Options, raw_options: Any) -> SlotRing:
    """Variants of one region (recompiles of one Dynamo frame, same torch.compile options
    object) share one ring, so their arenas are sized by the largest, not summed."""
    frame = _torch.current_frame_id()
    key = (frame, id(raw_options), opts)
    ring = _rings.get(key)
    if ring is None:
        ring = _rings[key] = SlotRing(f"region {frame if frame is not None else len(_rings)}", opts)
    return ring


class _Compiler:
    """Callbacks for one AOTAutograd compile: partition, then forward, then (lazily) backward."""

    def __init__(self, options: Options, ring: SlotRing):
        self.options = options
        self.ring = ring
        self.num_fwd_outputs: int | None = None
        self.static_inputs: list[int] = []
        self.bw_module: fx.GraphModule | None = None
        self.variant: Variant | None = None
        self.record: CompiledGraphs | None = None

    def partition(self, joint: fx.GraphModule, joint_inputs: Any, *, num_fwd_outputs: int,
                  **kwargs: Any) -> tuple[fx.GraphModule, fx.GraphModule]:
        if self.options.recompute != "none":
            observe("tag_recompute", tag_recompute, joint, RECOMPUTE[self.options.recompute],
                    summary=lambda n: f"{n} forward ops to recompute ({self.options.recompute})")
        fw, bw = PARTITIONERS[self.options.partitioner](
            joint, joint_inputs, num_fwd_outputs=num_fwd_outputs, **kwargs)
        if joint_inputs is not None and len(joint_inputs) == 0:
            return fw, bw  # a nested region's subgraph: the outer graph owns the slots
        self.num_fwd_outputs = num_fwd_outputs
        self.static_inputs = list(kwargs.get("static_lifetime_input_indices") or [])
        self.bw_module = bw
        return fw, bw

    def compile_inference(self, gm: fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
        counters["inference_graphs"] += 1
        return boxed(lambda args: gm(*args))

    def compile_forward(self, fw: fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
        """collect -> plan -> rewrite -> verify; or fall back, with the reason, to no slots.
        A failure inside the passes falls back too: it never stops the user's training."""
        before, pristine = format_graph(fw), snapshot(fw)
        try:
            return self._compile_forward(fw, example_inputs, before)
        except UnsupportedGraphError:  # strict=True: _fall_back raised it already
            raise
        except Exception as e:
            self.variant = None
            return self._fall_back(pristine(), None, before, failure_reason(e))

    def _compile_forward(self, fw, example_inputs, before) -> Callable[..., Any]:
        assert self.num_fwd_outputs is not None and self.bw_module is not None
        static = self.static_inputs or _torch.tracing_static_input_indices()
        saved = observe("collect_saved", collect_saved, fw, self.bw_module, self.num_fwd_outputs,
                        static, summary=lambda s: f"{len(s.tensors)} saved tensors in "
                                                  f"{len(s.groups)} storage groups")
        device = _device_of(saved, example_inputs)
        graphs = _use_graphs(device, self.options)
        binder = SymbolBinder(list(fw.graph.find_nodes(op="placeholder")))
        plan, reason = self._plan(fw, saved, static, graphs, binder)
        if plan is None:
            return self._fall_back(fw, saved, before, reason)
        observe("rewrite_forward", rewrite_forward, fw, saved, plan, self.num_fwd_outputs,
                graph=fw, summary=lambda n: f"{n} nodes changed or added")
        observe("verify_forward", verify_forward, fw, saved, plan, self.num_fwd_outputs,
                summary=lambda n: f"{n} postconditions hold")
        self.variant = Variant(name=f"v{len(self.ring.variants)}", ring=self.ring, device=device,
                               plan=plan, binder=binder, forward_graph=fw,
                               executor=_executor(self.options, graphs))
        self.ring.variants.append(weakref.ref(self.variant))
        self.record = _record(CompiledGraphs(self.variant, saved, plan, before, format_graph(fw)))
        _torch.trace_artifact("fxslots_plan", lambda: _plan_json(saved, plan), "json")
        _torch.trace_artifact("fxslots_forward", lambda: self.record.forward_after)
        return boxed(self.variant.forward)

    def _plan(self, fw, saved, static, graphs, binder) -> tuple[ArenaPlan | None, str | None]:
        reason = unplaceable_reason(saved) or _device_reason(saved)
        if reason is not None:
            return None, reason
        staged = collect_inputs(fw, static) if graphs else ()
        plan = observe("plan_arena", plan_arena, saved, alignment=self.options.alignment,
                       copy_free=self.options.copy_free, staged_inputs=staged,
                       offload=choose_offload(self.options.offload, saved),
                       summary=_plan_summary)
        missing = binder.missing([plan.capacity] + [
            e for v in (*plan.views, *plan.staging) for e in (v.storage_offset, *v.shape, *v.stride)]
            + [plan.host_capacity])
        if missing:
            return None, (f"shape symbols {sorted(map(str, missing))} cannot be read from the "
                          f"graph's inputs at run time")
        return plan, None

    def _fall_back(self, fw, saved, before, reason) -> Callable[..., Any]:
        reason = f"graph {_torch.compile_id() or '?'} ({self.ring.name}): {reason}"
        counters["fallbacks"] += 1
        warn_fallback(reason, self.options.strict)
        self.record = _record(CompiledGraphs(None, saved, None, before, before, fallback=reason))
        _torch.trace_artifact("fxslots_forward", lambda: f"runs without slots: {reason}\n{before}")
        return boxed(lambda args: fw(*args))

    def compile_backward(self, bw: fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
        if self.variant is not None:
            annotate_backward(bw, self.record.saved, self.variant.plan)
        text = format_graph(bw, "backward")
        if self.record is not None:
            self.record.backward = text
        _torch.trace_artifact("fxslots_backward", lambda: text)
        variant = self.variant
        if variant is None:  # this graph fell back: no slots
            return boxed(lambda args: bw(*args))
        variant.backward_graph = bw
        variant.saved_arg_index, variant.offloaded_args = backward_slot_args(
            self.record.saved, variant.plan)
        log.info("compile_backward: %s reads saved tensors from its slot", variant.name)
        return boxed(variant.backward)


def _record(rec: CompiledGraphs) -> CompiledGraphs:
    for r in _recorders:
        r.append(rec)
    return rec


def _device_reason(saved: SavedSet) -> str | None:
    devices = {t.device for t in saved.tensors}
    if len(devices) > 1:
        return f"saved tensors live on several devices {sorted(devices)}"
    return None


def _device_of(saved: SavedSet, example_inputs: Any) -> torch.device:
    for t in saved.tensors:
        return torch.device(t.device)
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            return x.device
    return torch.device("cpu")


def _use_graphs(device: torch.device, options: Options) -> bool:
    return device.type == "cuda" and options.cudagraphs is not False


def _executor(options: Options, graphs: bool):
    if graphs:
        from .cudagraphs import GraphExecutor

        return GraphExecutor(options)
    return EagerExecutor()


def _plan_summary(plan: ArenaPlan) -> str:
    return (f"{len([p for p in plan.placements if p.views])} groups in {plan.capacity} bytes "
            f"per slot, {plan.copied_bytes} bytes copied")


def _plan_json(saved: SavedSet, plan: ArenaPlan) -> str:
    from .report import plan_to_json

    return plan_to_json(saved, plan)
