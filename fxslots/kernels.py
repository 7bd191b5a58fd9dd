"""``options={"kernels": "inductor"}``: Inductor compiles the rewritten graphs; fxslots captures.

The joint graph is traced with Inductor's decompositions and run through its joint passes, as
``torch.compile``'s default backend does, then partitioned and rewritten as usual. The ATen
forward (what ``explain()`` prints) is lowered to the form Inductor takes (``passes/lower.py``),
compiled with ``compile_fx_inner`` (Inductor's CUDA graphs off), and the generated code is read
back to say which slot writes Inductor made in place (``passes/audit.py``): the plan the variant
keeps, and reports, is that one. Any graph Inductor cannot compile runs its ATen graph instead,
with a warning naming the graph and the cause (an error with ``strict=True``).
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import sympy
import torch
import torch.fx as fx

from . import _torch, ops, state
from .ops import runs_as_call
from .errors import UnsupportedGraphError, gist
from .options import Options
from .passes.audit import audit_forward
from .passes.lower import copy_graph, lower_forward
from .passes.lower_streams import carries_copies, lower_streams
from .passes.observe import observe
from .passes.retype import retype_statistics
from .printing import format_graph
from .schemas import ArenaPlan, SlotView

log = logging.getLogger(__name__)

# Bytes: Inductor's GPU kernels assume an input aligned to this when its example tensor is.
_INDUCTOR_ALIGNMENT = 16


def decompositions(options: Options) -> dict[Any, Callable[..., Any]] | None:
    return _torch.inductor_decompositions() if options.kernels == "inductor" else None


def partition(options: Options, partitioner: Callable[..., Any], joint: fx.GraphModule,
              joint_inputs: Any, **kwargs: Any) -> tuple[fx.GraphModule, fx.GraphModule]:
    """``partitioner``, after Inductor's joint-graph passes when Inductor compiles (the
    min-cut partitioner already weighs recomputation as for Inductor by default); with ATen
    kernels, which run the nodes as they are, values retyped to what those kernels return."""
    if options.kernels == "inductor":
        try:
            joint = _torch.inductor_joint_passes(joint)
        except Exception as e:  # noqa: BLE001 - they only optimise (each rewrite leaves a
            # valid graph): partition what they left
            _inductor_failed("the joint graph (its joint-graph passes failed)", e,
                             options.strict, "it is partitioned as they left it")
        return partitioner(joint, joint_inputs, **kwargs)
    fw, bw = partitioner(joint, joint_inputs, **kwargs)
    observe("retype_statistics", retype_statistics, fw, bw, kwargs["num_fwd_outputs"],
            graph=fw, summary=lambda n: f"{n} norm statistics typed fp32, as ATen returns them")
    return fw, bw


@dataclass(frozen=True)
class Compiled:
    """What Inductor made of one forward: the callable, the plan as its code writes the slot,
    and a finding per storage group."""

    run: Callable[..., Any]
    plan: ArenaPlan
    findings: tuple[str, ...]


def compile_forward(variant: Any, fw: fx.GraphModule, example_inputs: Any, static: list[int],
                    num_fwd_outputs: int, options: Options) -> Compiled | None:
    """Lower, compile and audit the rewritten forward ``fw`` of ``variant``; None when
    Inductor cannot take it (it then runs ``fw``)."""
    what = f"the forward graph of {variant.name} ({variant.ring.name})"
    try:
        fakes = _fake_views(variant.plan.views, fw, example_inputs)
        gm = observe("lower_forward", lower_forward, fw, runs_as_call, fakes,
                     summary=lambda g: f"{len(g.graph.nodes)} nodes for Inductor")
        if log.isEnabledFor(logging.DEBUG):
            log.debug("the graph Inductor compiles for %s:\n%s", what, format_graph(gm))
        _mark_user_outputs(gm, num_fwd_outputs)
        state.counters["inductor_compiles"] += 1  # runtime.cudagraphs.executor warms again
        compiled = _torch.inductor_compile(
            gm, list(example_inputs) + [fakes[v.name] for v in variant.plan.views],
            static_input_idxs=list(static), keep_order=carries_copies(gm))
    except Exception as e:  # noqa: BLE001 - Inductor's failures are many; each falls back
        _inductor_failed(what, e, options.strict)
        return None
    code = _torch.inductor_output_code(compiled)
    log.debug("Inductor's code for %s:\n%s", what, code)
    names = [p.name for p in gm.graph.find_nodes(op="placeholder")]
    plan, findings = observe("audit_forward", audit_forward, code, variant.plan, names,
                             summary=lambda r: f"{len(r[1])} slotted groups read back")
    return Compiled(_unboxed(compiled), plan, tuple(findings))


def compile_graph(gm: fx.GraphModule, example_inputs: Any, what: str, options: Options, *,
                  is_backward: bool = False, is_inference: bool = False,
                  instead: str = "it runs with ATen kernels",
                  last_pass: Callable[[fx.Graph], None] | None = None
                  ) -> Callable[..., Any] | None:
    """Inductor's compile of a graph fxslots does not rewrite (a backward, an inference graph,
    a forward that runs without slots); None when Inductor cannot take it. ``last_pass``: run
    on the graph Inductor lowers (``_torch.inductor_compile``)."""
    try:
        gm = copy_graph(gm)  # Inductor's passes rewrite the graph; the ATen one must survive
        keep_order = lower_streams(gm) > 0
        _mark_user_outputs(gm, None)
        # No static inputs: saved tensors arrive as slot views whose alignment the example
        # inputs may not show; Inductor then checks (and copies a misaligned one) at each call.
        state.counters["inductor_compiles"] += 1
        _torch.lower_after_reads(ops.fence)
        compiled = _torch.inductor_compile(gm, list(example_inputs), static_input_idxs=[],
                                           is_backward=is_backward, is_inference=is_inference,
                                           last_pass=last_pass, keep_order=keep_order)
    except Exception as e:  # noqa: BLE001 - Inductor's failures are many; each falls back
        _inductor_failed(what, e, options.strict, instead)
        return None
    log.debug("Inductor's code for %s:\n%s", what, _torch.inductor_output_code(compiled))
    return _unboxed(compiled)


def kernels_for(options: Options, gm: fx.GraphModule, example_inputs: Any, what: str,
                lazily: bool = False, **kw: Any) -> Callable[..., Any]:
    """``gm`` compiled by Inductor when it compiles (else, or if it fails, ``gm``);
    ``lazily``: at its first call (``Lazily``)."""
    if options.kernels != "inductor":
        return gm
    return _compiled(gm, example_inputs, what, options, lazily, **kw) or gm


def _compiled(gm: fx.GraphModule, example_inputs: Any, what: str, options: Options,
              lazily: bool, **kw: Any) -> Callable[..., Any] | None:
    """``compile_graph``'s result now, or a ``Lazily`` for it (running ``gm`` if it fails)
    where ``lazily`` and no input has a symbolic size (``_symbolic``)."""
    if lazily and not _symbolic(example_inputs):
        return Lazily(lambda: compile_graph(gm, example_inputs, what, options, **kw), gm)
    return compile_graph(gm, example_inputs, what, options, **kw)


def _symbolic(example_inputs: Any) -> bool:
    """Whether a graph's inputs have a symbolic size: the guards Inductor adds on it count
    only while Dynamo compiles the frame (its shape environment is frozen after, and a later
    guard is dropped: compiled at its first call at 8 rows, a CPU backward lost its guard for
    long reductions and at 200000 rows gave a gradient 7x further from float64 than
    torch.compile's). AOTAutograd compiles such a backward up front for the same reason."""
    return any(isinstance(d, torch.SymInt) for x in example_inputs
               for d in ((x,) if not isinstance(x, torch.Tensor)
                         else (*x.shape, *x.stride(), x.storage_offset())))


def compile_twin(twin: Any, example_inputs: Any, what: str, options: Options,
                 instead: str = "it runs with ATen kernels", lazily: bool = False,
                 last_pass: Callable[[fx.Graph], None] | None = None) -> Any:
    """``twin`` (a ``runtime.variant.Accumulate`` or ``Deliver``: a backward graph that takes
    buffers after the backward's own inputs) with Inductor's code for its graph in ``kernel``;
    None there when Inductor cannot take it (``instead`` says what happens then). ``lazily``:
    a ``Lazily`` that compiles at its first call and runs the ATen graph if that fails."""
    buffers = list(twin.graph.graph.find_nodes(op="placeholder"))[len(example_inputs):]
    inputs = list(example_inputs) + [b.meta["val"] for b in buffers]
    return dataclasses.replace(twin, kernel=_compiled(
        twin.graph, inputs, what, options, lazily, is_backward=True, instead=instead,
        last_pass=last_pass))


class Lazily:
    """Inductor's code for a graph, compiled at its first call inside the contexts of the
    compile that made it (as AOTAutograd compiles a backward lazily), or ``fallback`` (the
    ATen graph) where Inductor could not take it. The plain backward and the accumulating
    one are compiled so: a loop may never run them (with CUDA graphs a backward delivers its
    gradients through its delivering twin; only a loop that keeps ``.grad`` accumulates),
    and compiling all three doubled the first step's time against ``torch.compile`` default
    (H200 run 40e, llama-large: 110 s against 54)."""

    def __init__(self, compile: Callable[[], Callable[..., Any] | None],
                 fallback: Callable[..., Any]) -> None:
        self._compile: Callable[[], Any] | None = compile
        self._fallback = fallback
        self._contexts: Callable[[], Any] | None = _torch.compile_contexts()
        self.run: Callable[..., Any] | None = None  # set at the first call
        self.compiled = False  # Inductor's code runs (not the fallback)

    def __call__(self, *args: Any) -> Any:
        if self.run is None:
            with self._contexts():  # type: ignore[misc]
                made = self._compile()
            self.run, self.compiled = made or self._fallback, made is not None
            self._compile = self._contexts = None  # drop the example inputs, the fake mode
        return self.run(*args)


def _unboxed(compiled: Any) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        return compiled(list(args))  # Inductor empties the list it is given

    return run


def _inductor_failed(what: str, error: Exception, strict: bool,
                     instead: str = "it runs with ATen kernels") -> None:
    state.counters["inductor_fallbacks"] += 1
    log.debug("fxslots: Inductor's error compiling %s:\n%s", what, error)
    msg = (f"fxslots: Inductor could not compile {what} ({type(error).__name__}: "
           f"{gist(error)}); {instead}")
    if strict:
        raise UnsupportedGraphError(msg + " (strict=True)") from error
    warnings.warn(msg + " (set strict=True to make this an error)", stacklevel=4)


def _mark_user_outputs(gm: fx.GraphModule, n: int | None) -> None:
    """Tell Inductor which outputs the user sees (the first ``n``; all when None): it keeps
    their strides as traced, as ``torch.compile`` does."""
    output = next(iter(gm.graph.find_nodes(op="output")))
    outs = list(output.args[0])
    output.meta["user_visible_output_idxs"] = [
        i for i in range(len(outs) if n is None else n) if isinstance(outs[i], fx.Node)]


def _fake_views(views: tuple[SlotView, ...], fw: fx.GraphModule, example_inputs: Any
                ) -> dict[str, torch.Tensor]:
    """An example (fake) tensor per slot view, with the geometry of the value it holds."""
    mode = _torch.tracing_fake_mode() or next(
        x.fake_mode for x in example_inputs if _torch.is_fake(x))
    vals = {n.name: n.meta.get("val") for n in fw.graph.nodes}
    out = {}
    with mode:
        for v in views:
            like = vals[v.holds]
            device = torch.device("cpu") if v.host else like.device
            out[v.name] = _fake_view(like, device, v.host or _aligned(v))
    return out


def _fake_view(like: torch.Tensor, device: torch.device, aligned: bool) -> torch.Tensor:
    shape, stride = like.shape, like.stride()
    base = torch.empty_strided(shape, stride, dtype=like.dtype, device=device)
    if aligned:
        return base
    # One element in: Inductor must not assume this view aligned, as it is not in the arena (it
    # would clone an input it assumed aligned and found not to be, and write the clone).
    return torch.as_strided(base, shape, stride, 1)


def _aligned(view: SlotView) -> bool:
    """Whether the plan puts ``view`` at a multiple of Inductor's alignment for every shape
    (arena bases are aligned further: the plan's alignment is at least 16 bytes)."""
    start = sympy.sympify(view.storage_offset * view.dtype.itemsize)
    return sympy.Mod(start, _INDUCTOR_ALIGNMENT) == 0
