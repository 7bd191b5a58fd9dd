"""Inductor's private entry points, for options={"kernels": "inductor"} (part of fxslots._torch).

They have moved between releases; these wrappers take what torch 2.11 to 2.14 offer.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

def inductor_decompositions() -> dict[Any, Callable[..., Any]]:
    """The decompositions ``torch.compile``'s default backend traces with (Inductor refuses,
    say, ``aten.gelu``: it has a decomposition, so no fallback)."""
    # Some of these read torch._inductor.lowering (max_pool2d's asks whether to fall back),
    # which torch.compile's default backend imports first and fxslots must too.
    import torch._inductor.lowering  # noqa: F401
    from torch._inductor.decomposition import select_decomp_table

    return select_decomp_table()


def inductor_joint_passes(joint: Any) -> Any:
    """Inductor's passes over the joint graph, as its own partition function runs them."""
    from torch._inductor import compile_fx
    from torch._inductor.virtualized import V

    # Some passes (the random-op rewrite) make tensors under the compile's fake mode, which
    # torch.compile's default backend installs around partitioning.
    with V.set_fake_mode(tracing_fake_mode()):
        out = compile_fx._recursive_joint_graph_passes(joint, skip_invoke_subgraph=True)
    return joint if out is None else out  # some releases rewrite in place and return None


def inductor_compile(gm: Any, example_inputs: list[Any], *, static_input_idxs: list[int],
                     is_backward: bool = False, is_inference: bool = False,
                     last_pass: Callable[[Any], None] | None = None,
                     keep_order: bool = False) -> Any:
    """Inductor's compile of one already-partitioned graph, with its own CUDA graphs off
    (fxslots captures). The result takes its arguments as one list, which it empties.
    ``last_pass``: run on the graph Inductor lowers, after its own post-grad passes and any
    the user set (its config's ``post_grad_custom_post_pass``); Inductor then compiles the
    graph afresh rather than from its cache, which would skip the pass. ``keep_order``: no
    memory-driven reordering, which would hoist each offload join to its copy's start (the
    join is the copied value's last reader, so that frees it soonest) and make the compute
    stream wait for every copy: offload="auto" under Inductor took 1.25x (llama-small) and
    1.70x (heavy) no offload's step (H100 run 52a)."""
    from torch._inductor import compile_fx, config
    from torch._inductor.utils import BoxedBool

    # layout_optimization off: for a graph with convolutions Inductor would pick channels-last
    # buffers for its values and return those for saved outputs, whose layout the slot views
    # already fix (the backward, compiled for Inductor's layout, then refused the slot's).
    patch = {"triton.cudagraphs": False, "layout_optimization": False}
    # Inductor 2.11's one foreach kernel over tensors of symbolic size (an accumulating
    # backward's _foreach_add_ under dynamic shapes) loads a pointer it renamed (NameError
    # 'in_ptr1' at its first launch, H200 run 19): one kernel per tensor there instead.
    if "combo_kernel_foreach_dynamic_shapes" in config._config:
        patch["combo_kernel_foreach_dynamic_shapes"] = False
    if keep_order and "reorder_for_peak_memory" in config._config:
        patch["reorder_for_peak_memory"] = False
    if last_pass is not None:
        patch["post_grad_custom_post_pass"] = _after(config.post_grad_custom_post_pass,
                                                     last_pass)
    with config.patch(patch):
        return compile_fx.compile_fx_inner(
            gm, example_inputs, cudagraphs=BoxedBool(False),
            static_input_idxs=static_input_idxs, is_backward=is_backward,
            is_inference=is_inference)


def _after(user: Any, last: Callable[[Any], None]) -> Callable[[Any], None]:
    """One post-grad pass: the user's (one, or a list: 2.13 takes either), then ``last``."""
    first = () if user is None else tuple(user) if isinstance(user, (list, tuple)) else (user,)

    def both(graph: Any) -> None:
        for p in first:
            p(graph)
        last(graph)

    return both


def fence_hazard() -> str | None:
    """Why Inductor, as installed and configured, might not keep a fence's order (``lower_
    after_reads``), or None. A fence orders the reads before it by weak dependencies, which
    Inductor later marked fake (not holding a buffer's memory): its memory-driven reordering
    honours them only where it keeps a successor list for ordering apart. Inductor assuming
    every input aligned skips the check that runs a misaligned written input on a copy copied
    back (over a gradient); overlap scheduling re-sorts the graph by its data edges alone; a
    compile in a child process runs without fxslots' pass and lowering."""
    import dataclasses
    import os

    from torch._inductor import config, dependencies

    def fields(cls: Any) -> set[str]:
        return {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()

    try:
        from torch._inductor import memory
    except ImportError:  # no memory-driven reordering to honour anything
        memory = None
    fake = "is_fake" in fields(getattr(dependencies, "WeakDep", None))
    split = "succ_nodes_for_ordering" in fields(getattr(memory, "MemoryPlanningInfoForBuffer",
                                                        None))
    if fake and not split and getattr(config, "reorder_for_peak_memory", False):
        return (f"torch {torch.__version__}'s Inductor may reorder for memory across the "
                f"weak dependencies a fence adds (set torch._inductor.config."
                f"reorder_for_peak_memory=False to keep them)")
    if getattr(config, "assume_aligned_inputs", False):
        return "torch._inductor.config.assume_aligned_inputs is set"
    dist = getattr(config, "aten_distributed_optimizations", None)
    if getattr(dist, "enable_overlap_scheduling", False):
        return "Inductor's overlap scheduling is on (aten_distributed_optimizations)"
    mode = os.environ.get("TORCHINDUCTOR_FX_COMPILE_MODE", "normal").lower()
    if "async" in mode or "progressive" in mode or "subprocess" in mode:
        return f"TORCHINDUCTOR_FX_COMPILE_MODE={mode} compiles in another process"
    return None


def lower_after_reads(op: Any) -> None:
    """Have Inductor lower ``op`` (``op(buffer, dead)``, declaring both written) as its call,
    once every pending read of ``dead`` is realized. Inductor's own lowering of a call that
    writes a graph input registers the call first and realizes the input's pending readers
    (values it would compute later, inside the kernels that use them) only then, after it:
    a value read from ``dead`` before the call was computed after it (CPU, torch 2.13)."""
    from torch._inductor import lowering
    from torch._inductor.virtualized import V

    if op in lowering.lowerings:
        return
    call = lowering.fallback_handler(op, add_to_fallback_set=False)

    def lower(buffer: Any, dead: list[Any]) -> Any:
        for t in dead:
            V.graph.mark_buffer_mutated(t.get_name())  # realizes its pending readers
        return call(buffer, dead)

    lowering.register_lowering(op, type_promotion_kind=None)(lower)


def inductor_output_code(compiled: Any) -> str:
    """The Python wrapper and kernel sources Inductor generated for one graph."""
    return getattr(compiled, "source_code", None) or ""


def inductor_reads_threshold() -> int:
    """How many buffers a pointwise value with several users may read and still be computed
    inline by each of them (more, and Inductor stores it once: ``realize_reads_threshold``)."""
    from torch._inductor import config

    return int(getattr(config, "realize_reads_threshold", 4))


def inductor_falls_back(op: Any) -> bool:
    """Whether Inductor runs ``op`` as an ATen call (a fallback), not a kernel of its own."""
    from torch._inductor import lowering

    return op in lowering.fallbacks or op not in lowering.lowerings


def tracing_fake_mode() -> Any:
    """The FakeTensorMode of the compile in progress (its ShapeEnv holds the shape symbols)."""
    ctx = torch._guards.TracingContext.try_get()
    return None if ctx is None else ctx.fake_mode
