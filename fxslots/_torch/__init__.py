"""Every private PyTorch API fxslots touches, in one place.

fxslots supports torch 2.11 through 2.14. Private names move between releases; when one does,
this is the only module to change.
"""

from __future__ import annotations

from typing import Any, Callable

import torch


# AOTAutograd and its partitioners.
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.partitioners import (
    default_partition,
    min_cut_rematerialization_partition,
)
from torch.fx.experimental.proxy_tensor import is_sym_node
from torch.multiprocessing.reductions import StorageWeakRef

OpOverload = torch._ops.OpOverload  # the type of ``torch.ops.aten.mm.default``

__all__ = [
    "OpOverload",
    "aot_autograd",
    "default_partition",
    "min_cut_rematerialization_partition",
    "StorageWeakRef",
    "clear_cublas_workspaces",
    "current_frame_id",
    "frame_compiles", "declares_ranges",
    "end_allocate_to_pool",
    "keep_graph", "records_graph", "calling_node", "current_node", "runs_in_this_backward",
    "saved_released",
    "symbol_guards",
    "guard_at_most", "recompile_limit",
    "saved_tensors_watched", "muted_post_accumulate_hooks", "version",
    "storage_alias",
    "shape_env_of",
    "storage_key",
    "storage_cdata",
    "is_fake",
    "is_batched",
    "is_sym_node",
    "trace_artifact",
    "symbol_of",
    "mark_boxed",
    "tangent_indices",
    "returns_view",
    "size_hint",
    "tracing_static_input_indices",
    "forget_saved_dynamism",
    "overlaps",
    "foreach_copy_",
    "lower_after_reads", "fence_hazard",
    "accumulating_grads",
    "CheckedGrads",
    "running_accumulators",
    "watch_accumulators",
    "split_backward_hazard",
    "schedule_stages",
    "schedule_microbatches",
    "declare_no_donated_buffers",
    "inductor_decompositions",
    "inductor_joint_passes",
    "inductor_compile",
    "inductor_output_code",
    "inductor_falls_back",
    "tracing_fake_mode",
    "real_tensors",
    "is_dynamo_signal",
]


def sym_expr(x: Any) -> Any:
    """The sympy expression behind a SymInt (its ShapeEnv's symbols: ``s0``, ``2*s1``...)."""
    return x.node.expr


def op_schema(op: Any) -> Any:
    """The ``torch._C.FunctionSchema`` of an ``OpOverload``."""
    return op._schema


def op_qualname(op: Any) -> str:
    """``torch.ops.aten.mm.out`` -> ``"aten::mm.out"`` (``"aten::mm"`` for the default)."""
    schema = op._schema
    return schema.name + ("." + schema.overload_name if schema.overload_name else "")


def has_device_kernel(qualname: str, device_type: str) -> bool:
    """Whether ``qualname`` (``"aten::gelu.out"``) has a kernel registered for this device
    itself. Out= overloads that PyTorch generates from the functional op are registered only
    as CompositeExplicitAutograd: they run the functional kernel and then copy into ``out``."""
    key = {"cpu": "CPU", "cuda": "CUDA"}.get(device_type, device_type.upper())
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(qualname, key))


def saves_rng_state(node: Any) -> bool:
    """Whether ``node`` is the RNG state that activation checkpointing saves for backward to
    replay a random op (``run_and_save_rng_state(...)[0]``): backward feeds it back to the
    generator, so it passes through untouched."""
    import operator

    from torch._prims.rng_prims import run_and_save_rng_state

    return (node.op == "call_function" and node.target is operator.getitem
            and node.args[1] == 0 and getattr(node.args[0], "target", None)
            is run_and_save_rng_state)


def compile_id() -> str | None:
    """Dynamo's id of the graph being compiled, as its logs print it (``"0/1"``)."""
    compile_id = torch._guards.CompileContext.current_compile_id()
    return None if compile_id is None else str(compile_id)


def current_frame_id() -> int | None:
    """Dynamo's id of the frame being compiled: recompiles of one region share it."""
    compile_id = torch._guards.CompileContext.current_compile_id()
    return None if compile_id is None else compile_id.frame_id


def storage_alias(data_ptr: int, device: torch.device, nbytes: int) -> torch.UntypedStorage:
    """A new storage object over memory someone else owns.

    Each forward hands its saved tensors views of a fresh alias of the slot's arena, so the slot
    can tell when the last of them died (the alias's weak reference expires) even though the
    arena itself lives on.
    """
    return torch._C._construct_storage_from_data_pointer(data_ptr, device, nbytes)


def storage_key(t: torch.Tensor) -> Any:
    """Hashable identity of a tensor's storage; works on FakeTensors."""
    return StorageWeakRef(t.untyped_storage())


def storage_cdata(t: torch.Tensor) -> int:
    """The address of a tensor's storage object: what ``StorageWeakRef.cdata`` compares,
    without making a weak reference (this runs at every backward)."""
    return t.untyped_storage()._cdata


def is_fake(t: Any) -> bool:
    return isinstance(t, torch._subclasses.fake_tensor.FakeTensor)


def shape_env_of(vals: list[Any]):
    """The ShapeEnv behind the first symbolic value or fake tensor, or None."""
    for v in vals:
        if isinstance(v, torch.SymInt):
            return v.node.shape_env
        if is_fake(v) and v.fake_mode.shape_env is not None:
            return v.fake_mode.shape_env
    return None


def trace_artifact(name: str, payload: Callable[[], str], encoding: str = "string") -> None:
    """Write one artifact to TORCH_TRACE (tlparse shows it beside Dynamo's graphs)."""
    torch._logging.trace_structured(
        "artifact",
        metadata_fn=lambda: {"name": name, "encoding": encoding},
        payload_fn=payload,
    )


# A copy this large is launched alone: a multi-tensor copy's launches hold at most 320 blocks
# and ran 64 MiB copies at ~2.7 TB/s (H200 run 24a), and one more launch costs the host less
# than the device time it saves.
FOREACH_MAX_BYTES = 16 * 2**20


def overlaps(t: torch.Tensor) -> bool:
    """Whether some of ``t``'s elements share memory (an expanded tensor), or torch cannot
    tell: a copy cannot be written into such strides."""
    return torch._debug_has_internal_overlap(t) != 0  # 0: no overlap; 1: overlap; 2: unknown


def foreach_copy_(dst: list[torch.Tensor], src: list[torch.Tensor]) -> None:
    """One multi-tensor copy kernel for many small tensors, a copy_ of its own for each
    large one (and for all where ``_foreach_copy_`` is missing)."""
    if not _FOREACH or len(dst) == 1:  # one tensor (a staged input, a tangent): one copy_
        for d, s in zip(dst, src, strict=True):
            d.copy_(s)
        return
    alone = {i for i, d in enumerate(dst) if d.nbytes >= FOREACH_MAX_BYTES}
    for i in alone:
        dst[i].copy_(src[i])
    if alone:  # else, at most replays, the lists go as they are
        dst = [d for i, d in enumerate(dst) if i not in alone]
        src = [s for i, s in enumerate(src) if i not in alone]
    if dst:
        torch._foreach_copy_(dst, src)


_FOREACH = hasattr(torch, "_foreach_copy_")


def end_allocate_to_pool(device_index: int, pool: Any) -> None:
    """Stop routing this device's allocations to ``pool`` after a capture that ``capture_end``
    abandoned half-way (an invalidated capture raises before it gets there), and give back the
    hold on the pool that capture took; nothing when the allocator was not recording."""
    try:
        torch._C._cuda_endAllocateToPool(device_index, pool)
    except RuntimeError:  # "not currently recording": capture_end got that far itself
        return
    torch._C._cuda_releasePool(device_index, pool)


def clear_cublas_workspaces() -> None:
    """Drop cuBLAS's cached workspaces (the next matmul allocates one where it runs)."""
    torch._C._cuda_clearCublasWorkspaces()


def cublas_workspace_bytes() -> int:
    """The bytes of the workspace cuBLAS takes at a stream's first matmul; Hopper's default,
    32 MiB, the largest, where torch cannot say (2.13 and before; 2.14 without a GPU)."""
    get = getattr(torch._C, "_cuda_getCublasWorkspaceSize", None)
    return get() if get is not None and torch.cuda.is_available() else 32 * 2**20


def symbol_of(x: Any) -> Any:
    """The sympy symbol a SymInt stands for, or None (a plain int, or an expression)."""
    if not isinstance(x, torch.SymInt):
        return None
    e = x.node.expr
    return e if e.is_Symbol else None


def mark_boxed(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Tell AOTAutograd that ``fn`` takes its arguments as one list (the boxed convention)."""
    fn._boxed_call = True  # type: ignore[attr-defined]
    return fn


def tangent_indices(gm: Any) -> list[int]:
    """Positions of a backward graph's tangent placeholders."""
    from torch._functorch.partitioners import _is_tangent

    return [i for i, p in enumerate(gm.graph.find_nodes(op="placeholder")) if _is_tangent(p)]


def returns_view(target: Any) -> bool:
    """Whether an FX node's target returns a view of an input: ATen ops whose schema says so
    (not mutating ones, whose result is the tensor they wrote), and getitem."""
    # _unsafe_view's schema claims a fresh tensor, but it views its input's bytes.
    if getattr(target, "__name__", None) == "getitem" or str(target).startswith(
            "aten._unsafe_view"):
        return True
    schema = getattr(target, "_schema", None)
    if schema is None:
        return False
    return not schema.is_mutable and any(r.alias_info is not None for r in schema.returns)


def schedule_stages(schedule: Any) -> list[Any]:
    """The pipeline stages this rank runs in a ``torch.distributed.pipelining`` schedule: one
    for single-stage schedules (``_stage``), several for the multi-stage ones (``_stages``)."""
    stages = getattr(schedule, "_stages", None)
    return list(stages) if stages is not None else [schedule._stage]


def schedule_microbatches(schedule: Any) -> int:
    """How many microbatches a pipeline schedule splits each step into."""
    return int(schedule._n_microbatches)


from .autograd import (  # noqa: E402
    CheckedGrads, accumulating_grads, calling_node, current_node, keep_graph,
    is_batched, muted_post_accumulate_hooks, records_graph, running_accumulators,
    runs_in_this_backward, saved_released, saved_tensors_watched, split_backward_hazard, version,
    watch_accumulators,
)
from .compiling import (  # noqa: E402
    compile_contexts, declare_no_donated_buffers, forget_saved_dynamism, is_dynamo_signal,
    real_tensors, tracing_static_input_indices,
)
from .shapes import declares_ranges, frame_compiles, guard_at_most, recompile_limit  # noqa: E402
from .shapes import size_hint, symbol_guards, symbol_range  # noqa: E402
from .inductor import (  # noqa: E402 - below the helpers they use
    inductor_compile,
    inductor_decompositions,
    inductor_falls_back,
    inductor_joint_passes,
    inductor_output_code,
    inductor_reads_threshold,
    fence_hazard,
    lower_after_reads,
    tracing_fake_mode,
)
