"""What a backend needs from the compile it runs inside: Dynamo's signals, real tensors, and
AOTAutograd's metadata of the graph it compiles."""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch
import torch._dynamo.exc


def is_dynamo_signal(e: BaseException) -> bool:
    """Whether ``e`` is Dynamo's own (a restart of its analysis, say, which it raises through
    backends and catches itself), or a fake-tensor exception Dynamo turns into a graph break
    when a backend raises it (a data-dependent ``.item()`` met while AOTAutograd traces:
    Mixtral's routing on CUDA): never a failure of fxslots to report."""
    breaks = getattr(torch._dynamo.exc, "exceptions_allowed_to_be_fallback", ())
    return isinstance(e, (torch._dynamo.exc.TorchDynamoException, *breaks))


def real_tensors() -> Any:
    """A context where new tensors are real even inside a compile, whose FakeTensorMode is
    active while backends run (a measurement made there would time no-op fake copies)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    return unset_fake_temporarily()


def compile_contexts() -> Callable[[], contextlib.ExitStack]:
    """The tracing and compile contexts of the compile running now, to enter again later: a
    graph compiled at its first call needs its compile's shape environment and id, as
    AOTAutograd's lazy backward does (it enters the same two)."""
    from torch._guards import CompileContext, TracingContext, compile_context, tracing

    saved = TracingContext.try_get(), CompileContext.try_get()

    def enter() -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        stack.enter_context(tracing(saved[0]))
        stack.enter_context(compile_context(saved[1]))
        return stack

    return enter


def _tracing_metadata() -> Any:
    ctx = torch._guards.TracingContext.try_get()
    return getattr(ctx, "fw_metadata", None) if ctx is not None else None


def tracing_static_input_indices() -> list[int]:
    return list(getattr(_tracing_metadata(), "static_input_indices", None) or [])


def forget_saved_dynamism(saved: Any) -> int | None:
    """Stop AOTAutograd marking the saved tensors at ``saved`` (positions among the forward's
    saved values) dynamic at every forward: a hint for a compiled graph they feed next, set as
    an attribute (~0.2 us each, dozens a call), meaningless for the arena token they reach the
    backward as. Returns the last saved position AOTAutograd's runtime still reads by index
    (-1: none), or None where it counts some from the end (tensors saved without a version
    check) or its metadata is not found: a call may hand over fewer saved tensors (one token
    per arena, ``runtime.collapse``) only past that position."""
    meta = _tracing_metadata()
    marks = getattr(meta, "dynamic_saved_tensors_idxs", None)
    if not isinstance(marks, dict):
        return None
    for i in saved:
        marks.pop(i, None)
    try:  # a runtime that took the saved tensors up to a fixed position could take no fewer
        taken = meta.tensors_saved_for_backwards_slice
    except (AttributeError, AssertionError):
        return None
    if getattr(meta, "num_tensors_saved_with_no_vc_check", 0) or (
            taken.stop is not None and taken.stop >= 0):
        return None
    return max(marks, default=-1)


def declare_no_donated_buffers() -> None:
    """Tell AOTAutograd that the backward being compiled reuses none of its saved tensors'
    memory. True for fxslots: saved tensors live in slot arenas that the slot owns, and the
    backward graph runs as it is. Without it a backward run with ``retain_graph=True`` (the
    input-gradient step of zero-bubble schedules) fails on "compiled with non-empty donated
    buffers". AOTAutograd computes the list before the forward compiler runs and shares it
    between its outer and inner metadata, so it is emptied in place."""
    donated = getattr(_tracing_metadata(), "bw_donated_idxs", None)
    if donated:
        donated.clear()
