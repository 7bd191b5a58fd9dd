"""The ``fxslots`` torch.compile backend: AOTAutograd, then the slot passes, then the runtime.

Registered through the ``torch_dynamo_backends`` entry point (pyproject.toml) only.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any, Callable

import torch
import torch.fx as fx

from . import _torch, grads, kernels, policies, state
from .backward import BackwardRewrite, PreparedBackward, prepare_backward, take_backward
from .errors import OptionsError, UnsupportedGraphError
from .fallback import fall_back, run_uncaptured, trace_plainly
from .options import Options, refusing
from .passes import (backward_slot_args, collect_inputs, collect_saved, failure_reason, observe,
                     plan_arena, recomputed_ops, rewrite_forward, share_slot, slot_outputs,
                     snapshot, tag_recompute, unplaceable_reason, verify_forward)
from .capturable import uncapturable_reason
from .costs import caps_for
from .offloading import OffloadContext, choose_offload
from .passes.offload import schedule_offload
from .policies import PARTITIONERS, RECOMPUTE, is_host_scalar, resolve_partitioner
from .printing import format_graph
from .record import CompiledGraphs, graph_lines
from .report import plan_to_json
from .runtime.collapse import collapse_of
from .runtime.cudagraphs.executor import GraphExecutor
from .runtime.cudagraphs.inference import captures_on as _use_graphs
from .runtime.cudagraphs.inference import inference_runner
from .runtime.layout import SymbolBinder
from .runtime.region import Region, region_for
from .runtime.variant import EagerExecutor, Variant, boxed
from .schemas import ArenaPlan, SavedSet

log = logging.getLogger(__name__)


def fxslots_backend(gm: fx.GraphModule, example_inputs: list[Any], *,
                    options: dict[str, Any] | Options | None = None,
                    mode: str | None = None) -> Callable[..., Any]:
    """``torch.compile(model, backend="fxslots", options={...})``."""
    try:
        if mode is not None:
            raise OptionsError(
                f"fxslots takes no mode= (got {mode!r}); configure it through options={{...}}")
        opts = Options.parse(options)
        region = region_for(opts, options)  # an arena group may refuse these options
    except OptionsError as e:
        return refusing(e)  # raised at the call, where `except fxslots.OptionsError` sees it
    state.counters["compiles"] += 1
    compiler = _Compiler(opts, region)
    try:
        return _torch.aot_autograd(
            fw_compiler=compiler.compile_forward,
            bw_compiler=compiler.compile_backward,
            inference_compiler=compiler.compile_inference,
            partition_fn=compiler.partition,
            keep_inference_input_mutations=True,
            decompositions=kernels.decompositions(opts),
        )(gm, example_inputs)
    except Exception as e:  # noqa: BLE001 - fxslots' tracing never stops the user's training
        # Strict mode's own error, and Dynamo's signals (a restart), go on as they are.
        if isinstance(e, UnsupportedGraphError) or _torch.is_dynamo_signal(e):
            raise
        # A failure of the user's own code raises again in the plain trace.
        why = f"graph {_torch.compile_id() or '?'}: tracing it failed: {failure_reason(e)}"
        return trace_plainly(gm, example_inputs, fall_back(why, opts.strict))


class _Compiler:
    """Callbacks for one AOTAutograd compile: partition, then forward, then (lazily) backward."""

    def __init__(self, options: Options, region: Region):
        self.options = options
        self.region = region
        self.num_fwd_outputs: int | None = None
        self.recomputed: tuple[str, ...] = ()  # forward ops the recompute policy moved to bw
        self.partitioner = ""  # the one that split this graph ("auto" resolved)
        self.static_inputs: list[int] = []
        self.params: list[int] = []  # the static inputs that are tensors with elements
        self.bw_module: fx.GraphModule | None = None
        self.variant: Variant | None = None
        self.record: CompiledGraphs | None = None
        self.caps = None  # the device's rates, for offload planning
        self.backward: PreparedBackward | None = None  # rewritten as the forward compiled
        self.commit_offload = lambda: None  # auto's guards, once its plan is accepted
        self.fixed: int | None = None  # the last saved tensor AOTAutograd reads by position

    def partition(self, joint: fx.GraphModule, joint_inputs: Any, *, num_fwd_outputs: int,
                  **kwargs: Any) -> tuple[fx.GraphModule, fx.GraphModule]:
        checkpointed = any("recompute" in n.meta for n in joint.graph.nodes)  # by the user
        policy = RECOMPUTE[self.options.recompute]
        tagged = observe("tag_recompute", tag_recompute, joint,
                         lambda n: is_host_scalar(n) or policy(n), num_fwd_outputs,
                         summary=lambda t: f"{len(t)} forward ops to recompute "
                                           f"({self.options.recompute})")
        self.partitioner = resolve_partitioner(self.options.partitioner, self.options.kernels,
                                               checkpointed)
        fw, bw = kernels.partition(self.options, PARTITIONERS[self.partitioner], joint,
                                   joint_inputs, num_fwd_outputs=num_fwd_outputs, **kwargs)
        if joint_inputs is not None and len(joint_inputs) == 0:
            return fw, bw  # a nested region's subgraph: the outer graph owns the slots
        self.recomputed = recomputed_ops(bw, tagged)
        self.num_fwd_outputs = num_fwd_outputs
        self.static_inputs = list(kwargs.get("static_lifetime_input_indices") or [])
        self.bw_module = bw
        return fw, bw

    def compile_inference(self, gm: fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
        run = kernels.kernels_for(self.options, gm, example_inputs, "an inference graph",
                                  is_inference=True)
        runner = inference_runner(self.options, gm, example_inputs, run,
                                  _torch.tracing_static_input_indices())
        if state.recorders:  # only explain() reads it: no graph printed at every compile
            state.record(CompiledGraphs.of_inference(format_graph(gm), runner.how))
        return boxed(runner)

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
            return self._fall_back(pristine(), None, before, failure_reason(e), example_inputs)

    def _compile_forward(self, fw, example_inputs, before) -> Callable[..., Any]:
        assert self.num_fwd_outputs is not None and self.bw_module is not None
        _torch.declare_no_donated_buffers()
        static = self.static_inputs = (self.static_inputs
                                       or _torch.tracing_static_input_indices())
        saved = observe("collect_saved", collect_saved, fw, self.bw_module, self.num_fwd_outputs,
                        static, self.options.kernels, summary=lambda s: (
                            f"{len(s.tensors)} saved tensors in {len(s.groups)} storage groups"))
        # Before the capture check, which would otherwise announce that the slots stay.
        if (reason := unplaceable_reason(saved)) is not None:
            return self._fall_back(fw, saved, before, reason, example_inputs)
        device = _device_of(saved, example_inputs)
        graphs = _use_graphs(device, self.options)
        if graphs and (why := uncapturable_reason(saved, fw, device, static)) is not None:
            graphs = False
            self._run_uncaptured(why)
        binder = SymbolBinder(list(fw.graph.find_nodes(op="placeholder")))
        self.caps = caps_for(device, self.options.link_bandwidth,
                             fused=self.options.kernels == "inductor")
        plan, reason = self._plan(fw, saved, static, graphs, binder)
        if plan is None:
            return self._fall_back(fw, saved, before, reason, example_inputs)
        self._rewrite(fw, saved, plan)
        self._schedule(fw, saved, plan, device)
        self.variant = self._variant(fw, plan, binder, device, graphs, static, example_inputs)
        findings = self._inductor_forward(fw, example_inputs, static)
        plan = self.variant.plan  # as Inductor's code writes the slot, when it compiled
        self.record = state.record(CompiledGraphs(
            self.variant, saved, plan, before, format_graph(fw), forward_lines=graph_lines(fw),
            kernels=findings, partitioner=self.partitioner, recomputed=self.recomputed,
            recompute=self.options.recompute))
        _torch.trace_artifact("fxslots_plan", lambda: plan_to_json(saved, plan), "json")
        _torch.trace_artifact("fxslots_forward", lambda: self.record.forward_after)
        self.fixed = _torch.forget_saved_dynamism(  # their marks mean nothing on the tokens
            i - self.num_fwd_outputs for i in slot_outputs(saved, plan))
        return boxed(self.variant.forward)

    def _rewrite(self, fw, saved, plan) -> None:  # fw writes its saved tensors in their slots
        observe("rewrite_forward", rewrite_forward, fw, saved, plan, self.num_fwd_outputs,
                graph=fw, summary=lambda n: f"{n} nodes changed or added")
        if self.options.kernels == "aten":  # Inductor fuses the input into its kernel
            observe("share_slot", share_slot, fw, graph=fw, summary=lambda n: f"{n} shared")
        observe("verify_forward", verify_forward, fw, saved, plan, self.num_fwd_outputs,
                summary=lambda n: f"{n} postconditions hold")

    def _schedule(self, fw, saved, plan, device) -> None:
        """The forward's offload copies, then the backward's passes, run ahead of its compile
        so that they still fall back (``fxslots/backward.py``)."""
        if plan.offloaded_bytes != 0:
            observe("schedule_offload", schedule_offload, fw, self.caps,
                    self.options.offload_window, graph=fw, summary=str)
        self.backward = prepare_backward(self.bw_module, BackwardRewrite(
            saved, plan, self.caps, device, self.options.offload_window))

    def _variant(self, fw, plan, binder, device, graphs, static, example_inputs) -> Variant:
        self.params = [i for i in static if i < len(example_inputs)  # not an effect token
                       and policies.is_parameter_like(example_inputs[i])]
        self.commit_offload()  # the plan is accepted: auto's guards go in with the graph
        region = self.region
        variant = Variant(name=f"v{len(region.variants)}", region=region, device=device,
                          plan=plan, binder=binder, forward_graph=fw, candidates=tuple(self.params),
                          user_outputs=self.num_fwd_outputs)
        variant.executor = GraphExecutor(variant, self.options) if graphs else EagerExecutor()
        variant.deliver_forward = grads.deliver_forward(  # report.py prints it
            fw, self.num_fwd_outputs, device, self.options, variant.name) if graphs else None
        region.variants.append(weakref.ref(variant))
        return variant

    def _plan(self, fw, saved, static, graphs, binder) -> tuple[ArenaPlan | None, str | None]:
        staged = collect_inputs(fw, static) if graphs else ()
        offload = {}
        if self.options.offload != "none":
            ctx = OffloadContext.of(saved, fw, self.bw_module, self.caps)
            offload, self.commit_offload = choose_offload(self.options.offload, saved, ctx)
        plan = observe("plan_arena", plan_arena, saved, alignment=self.options.alignment,
                       copy_free=self.options.copy_free, staged_inputs=staged,
                       offload=offload, outputs_copied=graphs, summary=_plan_summary)
        missing = binder.missing([plan.capacity] + [
            e for v in (*plan.views, *plan.staging) for e in (v.storage_offset, *v.shape, *v.stride)]
            + [plan.host_capacity])
        if missing:
            return None, (f"shape symbols {sorted(map(str, missing))} cannot be read from the "
                          f"graph's inputs at run time")
        return plan, None

    def _inductor_forward(self, fw, example_inputs, static) -> tuple[str, ...]:
        if self.options.kernels != "inductor":
            return ()
        done = kernels.compile_forward(self.variant, fw, example_inputs, static,
                                       self.num_fwd_outputs, self.options)
        if done is None:
            return ("Inductor could not compile this forward: it runs with ATen kernels",)
        self.variant.forward_kernel, self.variant.plan = done.run, done.plan
        return done.findings

    def _run_uncaptured(self, why: str) -> None:
        run_uncaptured(f"graph {_torch.compile_id() or '?'} ({self.region.ring.name}): {why}",
                       self.options.strict)

    def _fall_back(self, fw, saved, before, reason, example_inputs) -> Callable[..., Any]:
        reason = f"graph {_torch.compile_id() or '?'} ({self.region.ring.name}): {reason}"
        fall_back(reason, self.options.strict)
        self.record = state.record(CompiledGraphs(
            None, saved, None, before, before, fallback=reason, forward_lines=graph_lines(fw),
            partitioner=self.partitioner, recomputed=self.recomputed,
            recompute=self.options.recompute))
        _torch.trace_artifact("fxslots_forward", lambda: f"runs without slots: {reason}\n{before}")
        run = kernels.kernels_for(self.options, fw, example_inputs,
                                  "a forward graph without slots")
        return boxed(lambda args: run(*args))

    def compile_backward(self, bw: fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
        if self.variant is not None:
            bw = take_backward(self.backward, bw, f"backward graph of {self.variant.name}")
        text = format_graph(bw, "backward")
        if self.record is not None:
            self.record.backward = text
            self.record.backward_lines = graph_lines(bw)
        _torch.trace_artifact("fxslots_backward", lambda: text)
        variant = self.variant
        run = kernels.kernels_for(self.options, bw, example_inputs, "the backward graph of "
                                  + (variant.name if variant is not None
                                     else "a graph without slots"), lazily=True,
                                  is_backward=True)
        if variant is None:  # this graph fell back: no slots
            return boxed(lambda args: run(*args))
        variant.backward_graph, variant.backward_kernel = bw, (run if run is not bw else None)
        graphs = isinstance(variant.executor, GraphExecutor)
        if graphs and (why := uncapturable_reason(None, bw, variant.device)) is not None:
            variant.executor.capturing = False  # before any backward ran: nothing captured
            self._run_uncaptured(f"its backward: {why}")
        # By position, not name: a saved RNG state reaches the backward under another name.
        variant.saved_arg_index, _ = backward_slot_args(self.record.saved, variant.plan)
        variant.saved_backward_args = {t.output_index: t.backward_index
                                       for t in self.record.saved.tensors
                                       if t.output_index >= 0 and t.backward_index >= 0}
        what = f"backward graph of {variant.name}"
        if graphs and self.fixed is not None:
            variant.collapse = collapse_of(self.record.saved, variant.plan, len(example_inputs),
                                           self.num_fwd_outputs + self.fixed)
        variant.unlinked = grads.unlinked_inputs(variant.forward_graph, bw, variant.user_outputs)
        variant.accumulate = grads.accumulate(bw, self.params, self.options, example_inputs,
                                              what, graphs, variant.forward_graph)
        if graphs and variant.executor.capturing:
            variant.deliver = grads.deliver(bw, self.params, variant, self.options,
                                            example_inputs, what, self.record.saved)
            if variant.deliver is not None:
                self.record.delivering = format_graph(variant.deliver.graph, "backward")
        log.info("compile_backward: %s reads saved tensors from its slot", variant.name)
        return boxed(variant.backward)


def _device_of(saved: SavedSet, example_inputs: Any) -> torch.device:
    for t in saved.tensors:
        return torch.device(t.device)
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            return x.device
    return torch.device("cpu")


def _plan_summary(plan: ArenaPlan) -> str:
    return (f"{len([p for p in plan.placements if p.views])} groups in {plan.capacity} bytes "
            f"per slot, {plan.copied_bytes} bytes copied")
