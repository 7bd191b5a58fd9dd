"""``fxslots.prepare``: compile and capture every shape variant before training starts."""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch

from . import _torch, state
from .errors import FxslotsError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prepared:
    """What ``prepare`` did: the variants it ran, the graphs it captured, the arena bytes."""

    examples: int
    compiles: int
    captures: int
    arena_bytes: tuple[int, ...]  # per slot, over every region
    seconds: float
    evaluations: int = 0
    inference_captures: int = 0

    def __str__(self) -> str:
        evals = (f", {self.evaluations} evaluations ({self.inference_captures} inference graph "
                 f"captures)" if self.evaluations else "")
        return (f"fxslots.prepare: {self.examples} examples, {self.compiles} compiles, "
                f"{self.captures} CUDA graph captures, arenas {list(self.arena_bytes)} bytes "
                f"per slot{evals}, {self.seconds:.2f} s")


def prepare(model: Any, examples: Sequence[Any] = (), *, slots: int = 1,
            in_flight: bool = False, hold_outputs: bool = False,
            evaluations: Sequence[Any] = (), eval_mode: bool = True) -> Prepared:
    """Run ``model`` (compiled with ``backend="fxslots"``) forward and backward on every example
    (a tuple of arguments, or one tensor), ``slots`` microbatches in flight, twice: the first
    pass compiles, sizes the arenas (largest example first, so they grow once) and warms up,
    the second captures every (shape, slot) the first could not. Gradients, buffers and random
    number generators are put back (not AOTAutograd's for checkpointed random ops on CUDA);
    post-accumulate-grad hooks do nothing meanwhile (``restored``).

    ``in_flight=True``: ``examples`` are the microbatches of one pass of a schedule that runs
    all their forwards, then all their backwards, in this order (GPipe's FFFFBBBB; ``slots``
    is then their number). Each then runs only on the slot it will take in training, so each
    slot is sized for its own microbatch, not every slot for the largest.

    ``hold_outputs=True``: the loop holds each output through its backward and the next
    forward (``out = model(x); loss = f(out); loss.backward()``): the graphs of a slot's two
    output buffers, each backward's tangents in the other (``banks.tangent_buffer``), are
    captured too. Left False (one buffer, for a loop that lets each output go), such a loop
    captures them in its first steps, logged. Afterwards a capture during training is a shape
    ``examples`` did not cover (logged once).
    """
    _check(examples, evaluations, slots)
    calls, evals = _as_calls(examples), _as_calls(evaluations)
    if not in_flight:
        calls.sort(key=lambda args: -sum(a.numel() for a in args if isinstance(a, torch.Tensor)))
    before, t0 = dict(state.counters), time.perf_counter()
    module = _module_of(model)
    with restored(module), _preparing():
        if calls:
            _run_passes(model, module, calls, slots, in_flight, hold_outputs)
        with evaluating(module, eval_mode), torch.no_grad():
            _evaluate(model, evals)
    if any(a.is_cuda for args in calls + evals for a in args if isinstance(a, torch.Tensor)):
        torch.cuda.synchronize()
    return _report(before, t0, len(calls), len(evals))


def _report(before: dict, t0: float, examples: int, evaluations: int) -> Prepared:
    grew = {k: state.counters[k] - before.get(k, 0)
            for k in ("compiles", "captures", "inference_captures")}
    report = Prepared(examples, grew["compiles"], grew["captures"],
                      tuple(s.nbytes for r in state.regions.values() for s in r.ring.slots),
                      time.perf_counter() - t0, evaluations, grew["inference_captures"])
    log.info("%s", report)
    return report


def _run_passes(model: Any, module: torch.nn.Module | None, calls: list, slots: int,
                in_flight: bool, hold: bool) -> None:
    """Twice (compile and warm up, then capture), every backward graph a slot can run: the
    one that returns gradients (no ``.grad`` yet) and the one that adds into ``.grad``; with
    ``hold``, then each group twice in a row, holding its outputs until the next call's
    forwards have run: its forwards into the slot's other output buffer and its backwards'
    tangents in each (group by group, so every shape takes both buffers)."""
    groups = [calls] if in_flight else [[args] * slots for args in calls]

    def passes(n: int) -> None:
        for _ in range(n):
            for group in groups:
                for first in range(len(group)):
                    _in_flight(model, module, group, first, None)
        for group in groups if hold else ():
            held: list = []
            for first in (0, 0) if len(group) == 1 else range(len(group)):
                _in_flight(model, module, group, first, held)

    passes(2)
    # A loop that drops gradients before each forward gets backwards that write them into
    # the arena (fxslots.overlay); which loop comes is not known yet: capture those too.
    # (A model that is no Module cannot have its gradients dropped between passes.)
    with _gradients_in_arenas() as any_:
        if any_ and module is not None:
            passes(1)


def _evaluate(model: Any, evals: list) -> None:
    """Each evaluation until its inference graph is captured: a warm-up, another where
    Inductor compiled the graph in the first, then the capture."""
    for args in evals:
        captured = state.counters["inference_captures"]
        for _ in range(3):
            model(*args)
            if state.counters["inference_captures"] > captured:
                break


@contextlib.contextmanager
def evaluating(module: torch.nn.Module | None, eval_mode: bool) -> Iterator[None]:
    """The module in eval mode for the block, if asked; each submodule's mode put back."""
    modes = [(m, m.training) for m in module.modules()] if module is not None else []
    if eval_mode and module is not None:
        module.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


def _check(examples: Any, evaluations: Any, slots: Any) -> None:
    """Raise before anything runs where ``prepare``'s arguments cannot mean what it does."""
    for name, given in (("examples", examples), ("evaluations", evaluations)):
        if not isinstance(given, (list, tuple)):
            raise FxslotsError(
                f"fxslots.prepare takes {name} as a list with one argument tuple (or one "
                f"tensor) per shape variant, got {type(given).__name__}: pass [x] or [(x, y)]")
    if not examples and not evaluations:
        raise FxslotsError("fxslots.prepare got no examples; pass one argument tuple per shape "
                           "variant the training will see (evaluations=... for the shapes of "
                           "its evaluations)")
    if type(slots) is not int or slots < 1:
        raise FxslotsError(f"fxslots.prepare: slots must be an int >= 1, the microbatches the "
                           f"training keeps in flight (its fxslots option 'slots'), got {slots!r}")


def _as_calls(examples: Sequence[Any]) -> list:
    return [e if isinstance(e, (tuple, list)) else (e,) for e in examples]


def _in_flight(model: Any, module: torch.nn.Module | None, group: list, first: int,
               held: list | None) -> None:
    """Every forward of ``group`` (argument tuples, in flight together) in order, then the
    backwards, ``first``'s first: it returns its gradients (no ``.grad`` yet), the others add
    into them. The forwards alone decide which slot each takes; the backwards' order moves
    nothing, so rotating ``first`` gives every slot both backward graphs. Each output is let
    go before the backwards, as a loop that turns it into its loss at once does: its slot's
    output buffer is then free, and the backward's tangents are staged there
    (``banks.tangent_buffer``); those are the graphs such a loop replays. Given ``held``
    (the last call's outputs), the forwards run while it holds them, then it holds the new
    ones through the backwards instead, as ``out = model(x); f(out).backward()`` does."""
    if module is not None:
        module.zero_grad(set_to_none=True)
    outs = [[o for o in _tensors(model(*args)) if o.requires_grad] for args in group]
    losses = [[o.float().sum() for o in out] for out in outs]
    if held is not None:
        held[:] = [o for out in outs for o in out]
    del outs
    losses.insert(0, losses.pop(first))
    for loss in losses:
        if loss:
            torch.autograd.backward(loss)


def _tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for e in x for t in _tensors(e)]
    if isinstance(x, dict):
        return [t for e in x.values() for t in _tensors(e)]
    return []


def _module_of(model: Any) -> torch.nn.Module | None:
    inner = getattr(model, "_orig_mod", model)
    return inner if isinstance(inner, torch.nn.Module) else None


@contextlib.contextmanager
def restored(module: torch.nn.Module | None, api: str = "fxslots.prepare") -> Iterator[None]:
    """Gradients, buffers and RNG states as they were before the block; the parameters'
    post-accumulate-grad hooks (an optimizer step in backward) muted in it; a warning naming
    the parameters something else wrote in place."""
    named = list(module.named_parameters()) if module is not None else []
    params = [p for _, p in named]
    grads, versions = [p.grad for p in params], [_torch.version(p) for p in params]
    owners = module.modules() if module is not None else ()
    buffers = [(m, name, b, b.detach().clone()) for m in owners
               for name, b in m.named_buffers(recurse=False)]
    for p in params:
        p.grad = None
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices), _torch.muted_post_accumulate_hooks(params):
        try:
            yield
        finally:
            for p, g in zip(params, grads, strict=True):
                p.grad = g
            with torch.no_grad():
                for m, name, b, saved in buffers:
                    b.copy_(saved)
                    setattr(m, name, b)  # a forward may rebind it (self.steps = self.steps + 1)
            _warn_written(api, [n for (n, p), v in zip(named, versions, strict=True)
                                if _torch.version(p) != v])


def _warn_written(api: str, names: list[str]) -> None:
    if names:  # copying every parameter to put them back would cost their memory again
        warnings.warn(
            f"{api}: the model wrote parameters {names[:5]}"
            f"{f' and {len(names) - 5} more' if len(names) > 5 else ''} in place while it ran "
            f"(a forward or hook that updates weights); {api} puts gradients, buffers and "
            f"random states back, not parameters: call it before loading the weights you "
            f"train from", stacklevel=4)


@contextlib.contextmanager
def _gradients_in_arenas() -> Iterator[bool]:
    """Every region that may put gradients in its arenas does, for the block; yields whether
    any may. What the regions learnt of the loop is put back after."""
    regions = [r for r in state.regions.values() if r.ring.options.grads_in_arena and any(
        v.deliver is not None and v.deliver.overlay is not None for v in r.live_variants())]
    learnt = [(r.grads_kept, r.grads_dropped) for r in regions]
    for r in regions:
        r.grads_kept, r.grads_dropped = False, True
    try:
        yield bool(regions)
    finally:
        for r, (kept, dropped) in zip(regions, learnt, strict=True):
            r.grads_kept, r.grads_dropped = kept, dropped


@contextlib.contextmanager
def _preparing() -> Iterator[None]:
    state.preparing += 1
    try:
        yield
    finally:
        state.preparing -= 1
