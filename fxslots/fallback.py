"""The one place a graph falls back (to no slots, or to no CUDA graphs): warn (or raise), and
count it."""

from __future__ import annotations

import warnings
from typing import Any, Callable

from . import _torch, state
from .errors import CaptureError, UnsupportedGraphError, failure_reason, gist
from .record import CompiledGraphs


def fall_back(reason: str, strict: bool) -> str:
    """Report that a graph runs without slots because of ``reason``; raises in strict mode.
    Returns ``reason``."""
    _report("fallbacks", f"fxslots: this graph runs without slots: {reason}", strict)
    return reason


def run_uncaptured(reason: str, strict: bool, slots: bool = True) -> None:
    """Report that a graph keeps its slots (``slots``: it has some) but runs without CUDA
    graphs because of ``reason``; raises in strict mode."""
    stay = " (its slots stay)" if slots else ""
    _report("uncaptured_graphs",
            f"fxslots: this graph runs without CUDA graphs{stay}: {reason}", strict)


def go_without(reason: str, strict: bool) -> None:
    """Report that an optional part (a backward's accumulating or delivering twin, fxslots'
    attention kernel) is not used because of ``reason``; the plain form does its work. Raises
    in strict mode."""
    _report("twin_fallbacks", f"fxslots: training goes on without {reason}", strict)


def or_without(make: Callable[[], Any], what: str, instead: str, strict: bool) -> Any:
    """``make()``, or None, with a warning naming ``what`` and the cause, when it fails: these
    graphs only spare work the plain backward does anyway; one must never stop training."""
    try:
        return make()
    except UnsupportedGraphError:  # strict=True, from inside: raised already
        raise
    except Exception as e:  # noqa: BLE001 - a pass failing on a graph it did not foresee
        go_without(f"{what}: {failure_reason(e)}; {instead}", strict)
        return None


def _report(counter: str, msg: str, strict: bool) -> None:
    state.counters[counter] += 1
    if strict:
        raise UnsupportedGraphError(msg + " (strict=True)")
    # 4: the frame fall_back's warning has always named, past this helper's own.
    warnings.warn(msg + " (set strict=True to make this an error)", stacklevel=4)


def trace_plainly(gm: Any, example_inputs: Any, reason: str | None = None) -> Any:
    """``gm`` compiled as aot_eager would: traced without fxslots' settings, run as traced.
    ``reason``: why its trace for fxslots failed, recorded with Dynamo's graph (``explain``)."""
    if reason is not None:
        text = gm.print_readable(print_output=False)  # Dynamo's graph: its values untraced
        state.record(CompiledGraphs(None, None, None, text, text, fallback=reason))

    def as_traced(g: Any, _inputs: Any) -> Any:
        return _torch.mark_boxed(lambda args: g(*args))

    return _torch.aot_autograd(fw_compiler=as_traced, bw_compiler=as_traced,
                               keep_inference_input_mutations=True)(gm, example_inputs)


def capture_failed(failed: Any, what: str, compiled: bool, whole: str, options: Any,
                   uncaptured: set, key: Any) -> None:
    """A capture of ``what`` failed (a ``pool.CaptureFailed``; ``compiled``: the graph ran as
    one call of Inductor's code): raise ``CaptureError`` naming where and how to run it
    uncaptured (``whole``: the option for every such graph), or, with
    ``on_capture_failure="eager"``, warn and add ``key`` to ``uncaptured``."""
    root = failed.cause
    msg = (f"fxslots: capturing {what} as a CUDA graph failed at {failed.where(compiled)}: "
           f"{type(root).__name__}: {gist(root)}. Set options={{'on_capture_failure': "
           f"'eager'}} to run it without a CUDA graph, or {whole}")
    if options.on_capture_failure != "eager":
        raise CaptureError(msg) from root
    warnings.warn(msg, stacklevel=5)
    uncaptured.add(key)


def no_second_order(name: str, unlinked: int, strict: bool, noted: bool) -> bool:
    """A ``create_graph=True`` backward of ``name``, whose gradients are not linked to
    ``unlinked`` of its inputs: warn the first time (``noted``: warned already), raise in strict
    mode. Returns True."""
    if noted and not strict:
        return True
    _report("no_second_order", (
        f"fxslots: {name}: a backward with create_graph=True (a gradient penalty, say): its "
        f"gradients cannot be differentiated again with respect to {unlinked} of the compiled "
        f"graph's inputs (parameters among them), which it saves as values computed from them. "
        f"torch.compile's AOTAutograd does not support double backward: a second backward "
        f"that reaches the graph raises, and one restricted to those inputs "
        f"(backward(inputs=...), autograd.grad(..., allow_unused=True)) leaves their part out. "
        f"Compute this gradient outside the compiled region (torch.compiler.disable)"), strict)
    return True
