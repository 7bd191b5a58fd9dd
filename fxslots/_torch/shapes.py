"""The ShapeEnv's view of shape symbols (part of fxslots._torch)."""

from __future__ import annotations

from typing import Any

import torch


def size_hint(x: Any) -> int:
    """A concrete example value of a (possibly symbolic) size, without adding guards."""
    if not isinstance(x, torch.SymInt):
        return int(x)
    from torch.fx.experimental import symbolic_shapes as ss

    if hasattr(ss, "optimization_hint"):  # torch >= 2.12
        return int(ss.optimization_hint(x))
    env, e = x.node.shape_env, x.node.expr
    hint = env.size_hint(e, allow_none=True)
    if hint is None:  # data-dependent (u0): hinted with the fallback torch >= 2.12 uses
        import sympy
        from torch._inductor.config import unbacked_symint_fallback

        fallback = sympy.Integer(unbacked_symint_fallback)
        e = e.xreplace({u: fallback for u in ss.free_unbacked_symbols(e)})
        hint = env.size_hint(e)
    return int(hint)


def symbol_guards(shape_env: Any) -> tuple[Any, ...]:
    """The boolean sympy expressions Dynamo guarded on (``Eq(Mod(s53, 2), 0)`` when a size was
    split in two): every shape the graph will run at satisfies them."""
    return tuple(g.expr for g in getattr(shape_env, "guards", ()))


def symbol_range(shape_env: Any, symbol: Any) -> tuple[int, int | None]:
    """(lowest, highest or None) the ShapeEnv allows ``symbol``."""
    r = shape_env.var_to_range.get(symbol)
    lo = int(r.lower) if r is not None and r.lower.is_Integer else 0
    hi = int(r.upper) if r is not None and r.upper.is_Integer else None
    return lo, hi


def guard_at_most(shape_env: Any, symbol: Any, value: int) -> None:
    """Guard the graph being compiled on ``symbol <= value``: Dynamo compiles it again for a
    larger value (guards a backend adds while compiling are installed with Dynamo's own)."""
    import sympy

    shape_env.evaluate_expr(sympy.Le(symbol, value))


def recompile_limit() -> int:
    """How many graphs Dynamo compiles for one frame before it runs the frame eagerly."""
    import torch._dynamo.config as config

    return int(getattr(config, "recompile_limit", getattr(config, "cache_size_limit", 8)))


def declares_ranges(marked: bool = False) -> bool:
    """Whether an input of the graph being compiled has a size range its user declared
    (``torch._dynamo.mark_dynamic(t, dim, min=, max=)``): Dynamo fails the compile when a
    guard narrows it (ConstraintViolationError), so no guard may. ``marked``: or any dimension
    marked dynamic (``mark_dynamic(t, dim)``), which a guard may narrow but not pin to one
    size."""
    import torch
    from torch.fx.experimental.symbolic_shapes import (RelaxedUnspecConstraint,
                                                       StrictMinMaxConstraint)

    kinds = (StrictMinMaxConstraint, RelaxedUnspecConstraint) if marked else StrictMinMaxConstraint
    contexts = getattr(torch._guards.TracingContext.try_get(), "tensor_to_context", None)
    return any(isinstance(dim, kinds)
               for c in (list(contexts.values()) if contexts is not None else ())
               for dim in (getattr(c, "constraint_sizes", None) or ()))


def frame_compiles() -> int:
    """How many graphs Dynamo compiled for the frame being compiled before this one."""
    import torch

    compile_id = torch._guards.CompileContext.current_compile_id()
    return 0 if compile_id is None else int(compile_id.frame_compile_id or 0)
