"""The autograd engine's private state fxslots reads (part of fxslots._torch)."""

from __future__ import annotations

import contextlib
import functools
import sys
import weakref
from typing import Any, Callable, Iterator

import torch
import torch._dynamo.compiled_autograd as _compiled_autograd

from ..geometry import obeys_grad_layout


def keep_graph() -> bool:
    """True inside a backward called with retain_graph=True: saved tensors stay readable."""
    return bool(torch._C._autograd._get_current_graph_task_keep_graph())


def is_batched(t: torch.Tensor | None) -> bool:
    """Whether vmap batches ``t`` (functorch's or is_grads_batched's; absent checks skipped)."""
    return t is not None and any(f is not None and f(t) for f in _BATCHED)


_BATCHED = [getattr(torch._C._functorch, n, None)
            for n in ("is_legacy_batchedtensor", "is_batchedtensor")]


def records_graph() -> bool:
    """Inside a backward recording a graph (``create_graph=True``, which keeps it), where grad
    mode is off: AOTAutograd runs it in its double-backward function's forward (``double_ctx``)."""
    if not keep_graph():
        return False
    frame = sys._getframe(1)
    for _ in range(16):
        if frame is None:
            return False
        code = frame.f_code  # (its plain path calls the same impl_fn, double_ctx=None)
        if ("double_ctx" in code.co_varnames[:code.co_argcount]
                and frame.f_locals.get("double_ctx") is not None):
            return True
        frame = frame.f_back
    return False


def calling_node() -> Any:
    """A weak reference to the autograd node of the AOTAutograd call this forward runs in (its
    ``CompiledFunction``'s ctx, the grad_fn its outputs get): the nearest frame above that holds
    one, or None where none does (a torch whose wrapper differs, a call from elsewhere)."""
    f = sys._getframe(1)
    for _ in range(16):
        if f is None:
            return None
        code = f.f_code  # f_locals builds a dict of the frame's locals: only where one is ctx
        if code.co_name == "forward" and "ctx" in code.co_varnames:
            node = _node_in(f)
            if node is not None:
                return node
        f = f.f_back
    return None


def _node_in(frame: Any) -> Any:
    ctx = frame.f_locals.get("ctx")
    if (isinstance(ctx, torch.autograd.function.BackwardCFunction)
            and type(ctx).__name__ == "CompiledFunctionBackward"):
        return weakref.ref(ctx)
    return None


def saved_released(node: Any) -> bool:
    """Whether the autograd node behind the weak reference ``node`` no longer holds its saved
    tensors: it is gone, or a backward run without retain_graph freed them (reading the raw
    saved variables unpacks nothing: no saved-tensor hook runs)."""
    ctx = node()
    if ctx is None:
        return True
    try:
        ctx._raw_saved_tensors
    except RuntimeError:  # "Trying to backward through the graph a second time"
        return True
    return False


def current_node() -> Any:
    """The autograd node the engine is running now (this backward's own)."""
    return torch._C._current_autograd_node()


def runs_in_this_backward(node: Any) -> bool:
    """Whether the backward pass running now executes ``node`` (or already has); True where
    the engine cannot tell (no pass of its own runs: compiled autograd's trace)."""
    try:
        return bool(torch._C._will_engine_execute_node(node))
    except RuntimeError:
        return True


def saved_tensors_watched() -> bool:
    """Whether something beyond the compiled backward will look at the tensors a forward saves
    now: saved-tensor hooks (``save_on_cpu``, checkpointing's) pack each one, and compiled
    autograd traces the backward with their shapes."""
    if torch._C._autograd._top_saved_tensors_default_hooks(True) is not None:
        return True
    return bool(getattr(_compiled_autograd, "compiled_autograd_enabled", False)
                or getattr(_compiled_autograd, "in_compiled_autograd_region", False))


def accumulating_grads(params: list[torch.Tensor | None],
                       checked: CheckedGrads | None = None) -> list[torch.Tensor] | None:
    """The parameters' ``.grad`` buffers when adding into each in place is what autograd's
    AccumulateGrad would do, else None: a dense buffer of the parameter's dtype, shape and
    device, recording no graph, no hook on the parameter that expects to see the gradient
    (tensor hooks, post-accumulate hooks), and a backward that accumulates into it at all.
    Run every backward: it is the host cost of persistent ``.grad`` (issue 12), so the layout
    is read again only for buffers ``checked`` (the caller's, kept between calls) has not seen."""
    grads = []
    for p in params:
        g = None if p is None or not p.is_leaf else p.grad
        # None at the first parameter after zero_grad(set_to_none=True); and a parameter frozen
        # since its forward, whose AccumulateGrad adds nothing; a non-leaf in a parameter's
        # place (functional_call with noised weights) has no accumulator
        if g is None or not p.requires_grad:
            return None
        grads.append(g)
    if checked is None or not checked.holds(grads):
        # One buffer twice (weights tied after compiling: one parameter at two inputs): the
        # graph would add its two gradients one after the other, autograd their sum once.
        if not all(map(_same_layout, params, grads)) or _overlapping(grads):
            return None
        if checked is not None:
            checked.keep(grads)
    for p, g in zip(params, grads, strict=True):
        if g.requires_grad or p._backward_hooks or getattr(p, "_post_accumulate_grad_hooks", None):
            return None
    accumulators = running_accumulators()  # only now: it reads every input's edge
    if not all(_engine_accumulates(p, accumulators.get(id(p))) for p in params):
        return None
    return grads


def _overlapping(grads: list[torch.Tensor]) -> bool:
    """Whether two buffers share bytes (``b.grad = a.grad.view(...)``, overlapping slices): one
    multi-tensor add writes them at once on CUDA (an update lost: 0.045 off on an H100), where
    autograd adds one after the other. Dense buffers (``_same_layout``) span numel * itemsize
    bytes; sorted by start, two overlap only if two neighbours do."""
    spans = sorted((g.data_ptr(), g.data_ptr() + g.numel() * g.element_size())
                   for g in grads if g.numel())
    return any(start < end for (_, end), (start, _) in zip(spans, spans[1:]))


def _same_layout(param: torch.Tensor, grad: torch.Tensor) -> bool:
    # strides too: an accumulating twin Inductor compiled expects those of AccumulateGrad's
    # contract (an ATen one adds into any), and a .grad the user set may have others
    return (grad.layout is torch.strided and grad.dtype == param.dtype
            and grad.shape == param.shape and grad.device == param.device
            and obeys_grad_layout(param, grad))


class CheckedGrads:
    """The ``.grad`` buffers a check found of their parameters' layout, held weakly with their
    addresses. The same tensors at the same addresses have the dtype, shape, device and layout
    they had then: those change only by in-place metadata operations (``resize_``, ``set_``,
    ``.data =`` onto other memory moves the address), which nothing applies to a ``.grad``, and
    Dynamo's guards recompile when a parameter's own layout changes. What can change under an
    unchanged buffer (requires_grad, hooks, the engine's plan) is read at every check."""

    __slots__ = ("refs", "ptrs")

    def __init__(self) -> None:
        self.refs: tuple = ()
        self.ptrs: tuple = ()

    def holds(self, grads: list[torch.Tensor]) -> bool:
        return len(grads) == len(self.refs) and all(
            r() is g and g.data_ptr() == ptr for r, g, ptr in zip(self.refs, grads, self.ptrs))

    def keep(self, grads: list[torch.Tensor]) -> None:
        self.refs = tuple(weakref.ref(g) for g in grads)
        self.ptrs = tuple(g.data_ptr() for g in grads)


def running_accumulators() -> dict[int, Any]:
    """The AccumulateGrad nodes the running backward node feeds, by id of their leaf: the edges
    the engine will take. ``get_gradient_edge`` finds a leaf's node by viewing it (about 5 us
    a parameter, every backward); these come from ``next_functions`` at once. Empty outside a
    backward node (compiled autograd, a direct call) and on a torch without these names."""
    node = _CURRENT_NODE() if _CURRENT_NODE is not None and _ACCUMULATE_GRAD is not None else None
    if node is None:
        return {}
    return {id(f.variable): f for f, _ in node.next_functions if isinstance(f, _ACCUMULATE_GRAD)}


def watch_accumulators(params: list[torch.Tensor], grads: list[Any] | None,
                       report: Callable[[torch.Tensor, bool], None]) -> list[Any]:
    """Call ``report(param, shared)`` when each parameter's AccumulateGrad node of the running
    backward pass is about to add: ``shared`` when ``grads``'s gradient (the running node's) is
    not all it got but summed with another node's (code outside fxslots that uses the parameter
    too). Each gradient is held until then: the engine adds into a buffer in place only where
    it holds the last reference, so a sum never keeps this one's address. ``grads`` None: the
    running node added its gradients into ``.grad`` itself and hands the accumulators none, so
    any they get is another node's. Returns the hooks' handles (each fires once). Only
    parameters the pass accumulates into and no tensor hook changes."""
    accumulators, handles = running_accumulators(), []
    for p, g in zip(params, grads or [None] * len(params), strict=True):
        # a tensor hook's result, not the sum, would stand in the accumulator's input
        node = None if p._backward_hooks else _running_accumulator(p, accumulators.get(id(p)))
        if (grads is not None and not isinstance(g, torch.Tensor)) or node is None:
            continue
        held, param = [g], weakref.ref(p)

        def check(grad_inputs: tuple, held: list = held, param: Any = param) -> None:
            p = param()
            if held and p is not None:  # released at once: the engine then steals it as .grad
                mine, got = held.pop(), grad_inputs[0]
                report(p, got is not None if mine is None else (
                    got is None or got.data_ptr() != mine.data_ptr()))

        handles.append(node.register_prehook(check))
    return handles


# Private names a later torch may move: without them every parameter builds its edge instead.
_CURRENT_NODE = getattr(torch._C, "_current_autograd_node", None)
_ACCUMULATE_GRAD = getattr(getattr(torch._C, "_functions", None), "AccumulateGrad", None)


def _engine_accumulates(param: torch.Tensor, node: Any) -> bool:
    """Whether the running backward accumulates into ``param.grad`` at all: ``.backward()``
    reaching it does; ``torch.autograd.grad`` and ``backward(inputs=...)`` without it do not
    (zero-bubble pipelines compute input and weight gradients with ``autograd.grad``)."""
    return _running_accumulator(param, node) is not None


def _running_accumulator(param: torch.Tensor, node: Any) -> Any:
    """``param``'s AccumulateGrad node (``node``, from ``running_accumulators``, or its
    gradient edge's) if the running backward executes it, else None."""
    try:
        if node is None or node.variable is not param:  # an id can outlive its tensor
            node = torch.autograd.graph.get_gradient_edge(param).node
        return node if torch._C._will_engine_execute_node(node) else None
    except RuntimeError:  # autograd.grad() asked for leaf gradients: it accumulates nothing
        return None


class _Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


@functools.cache
def split_backward_hazard() -> str | None:
    """Why this torch cannot run a zero-bubble schedule's weight step over a compiled stage, or
    None. The input step detaches the stage's outputs and keeps only the Python objects of the
    autograd nodes the weight step starts from; before torch 2.13 a custom Function's node (a
    compiled stage is one) dies with its last tensor, and the weight step fails reading it."""
    node = _Identity.apply(torch.ones(1, requires_grad=True)).grad_fn
    try:
        node._input_metadata
    except AttributeError:  # a torch without the attribute: its weight step reads another
        return None
    except RuntimeError:
        return (f"torch {torch.__version__} frees a compiled stage's autograd node once the "
                f"input-gradient step (I) detaches the stage's outputs, so the weight step (W) "
                f"fails reading it")
    return None


def version(t: torch.Tensor) -> int:
    """``t``'s version counter: every in-place write to it (or a view of it) bumps it."""
    return t._version


@contextlib.contextmanager
def muted_post_accumulate_hooks(params: list[torch.Tensor]) -> Iterator[None]:
    """The post-accumulate-grad hooks of ``params`` (an optimizer step in backward) do nothing
    in the block. They stay registered, so what reads whether there are any
    (``accumulating_grads``) sees what training will."""
    saved = [(h, dict(h)) for p in params
             if (h := getattr(p, "_post_accumulate_grad_hooks", None))]
    for hooks, _ in saved:
        for key in hooks:
            hooks[key] = _no_hook
    try:
        yield
    finally:
        for hooks, before in saved:
            for key in hooks.keys() & before.keys():
                hooks[key] = before[key]


def _no_hook(param: torch.Tensor) -> None:
    return None
