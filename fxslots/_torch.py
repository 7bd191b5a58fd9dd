"""Every private PyTorch API fxslots touches, in one place.

fxslots supports torch 2.11 through 2.14. Private names move between releases; when one does,
this is the only module to change.
"""

from __future__ import annotations

from typing import Any, Callable

import torch


# AOTAutograd and its partitioners.
from torch._dynamo.backends.common import aot_autograd  # noqa: E402
from torch._functorch.partitioners import (  # noqa: E402
    default_partition,
    min_cut_rematerialization_partition,
)
from torch.fx.experimental.proxy_tensor import is_sym_node  # noqa: E402
from torch.multiprocessing.reductions import StorageWeakRef  # noqa: E402

OpOverload = torch._ops.OpOverload  # the type of ``torch.ops.aten.mm.default``

__all__ = [
    "OpOverload",
    "aot_autograd",
    "default_partition",
    "min_cut_rematerialization_partition",
    "StorageWeakRef",
    "clear_cublas_workspaces",
    "current_frame_id",
    "end_allocate_to_pool",
    "keep_graph",
    "storage_alias",
    "shape_env_of",
    "storage_key",
    "is_fake",
    "is_sym_node",
    "trace_artifact",
]


def size_hint(x: Any) -> int:
    """A concrete example value of a (possibly symbolic) size, without adding guards."""
    if not isinstance(x, torch.SymInt):
        return int(x)
    from torch.fx.experimental import symbolic_shapes as ss

    if hasattr(ss, "optimization_hint"):  # torch >= 2.12
        return int(ss.optimization_hint(x))
    return int(x.node.shape_env.size_hint(x.node.expr))


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


def symbol_range(shape_env: Any, symbol: Any) -> tuple[int, int | None]:
    """(lowest, highest or None) the ShapeEnv allows ``symbol``."""
    r = shape_env.var_to_range.get(symbol)
    lo = int(r.lower) if r is not None and r.lower.is_Integer else 0
    hi = int(r.upper) if r is not None and r.upper.is_Integer else None
    return lo, hi


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


def keep_graph() -> bool:
    """True inside a backward called with retain_graph=True: saved tensors stay readable."""
    return bool(torch._C._autograd._get_current_graph_task_keep_graph())


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


def tracing_static_input_indices() -> list[int]:
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    return list(getattr(meta, "static_input_indices", None) or [])


def foreach_copy_(dst: list[torch.Tensor], src: list[torch.Tensor]) -> None:
    """One multi-tensor copy kernel for many tensors (a copy_ each where it is missing)."""
    if hasattr(torch, "_foreach_copy_"):
        torch._foreach_copy_(dst, src)
    else:
        for d, s in zip(dst, src, strict=True):
            d.copy_(s)


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
