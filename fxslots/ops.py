"""Custom operators that let Inductor write saved values straight into slot views.

Inductor has no lowering for out= overloads ("out= ops aren't yet supported"), and an op it runs
as an ATen call (a matmul, a convolution, one of its fallbacks) returns a fresh buffer, so a
``copy_`` of its result into a graph input costs a copy kernel. These ops take the slot view as
an argument they declare mutated (``Tensor(a!)``): Inductor calls them as one extern kernel that
writes the slot itself, and orders every later reader of the slot after them.

They are defined on first use, in the ``fxslots`` namespace, one per out= overload met.
"""

from __future__ import annotations

from typing import Any

import torch

from . import _torch

_LIB = torch.library.Library("fxslots", "FRAGMENT")
_INTO: dict[str, _torch.OpOverload] = {}


def into_op(out_overload: _torch.OpOverload) -> _torch.OpOverload:
    """``fxslots::<op>_<overload>_into``: the arguments of ``out_overload``, returning nothing,
    so that Inductor accepts it (it refuses ops that return an alias of an input)."""
    schema = _torch.schema_of(out_overload)
    key = f"{schema.name}.{schema.overload_name}"
    op = _INTO.get(key)
    if op is None:
        text = str(schema)
        name = f"{schema.name.split('::')[-1]}_{schema.overload_name}_into"
        _LIB.define(name + text[text.index("("):text.rindex(" -> ")] + " -> ()")

        def run(*args: Any, **kwargs: Any) -> None:
            out_overload(*args, **kwargs)

        _LIB.impl(name, run, "CompositeExplicitAutograd")
        torch.library.register_fake(f"fxslots::{name}", _nothing, lib=_LIB)
        op = _INTO[key] = getattr(torch.ops.fxslots, name).default
    return op


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


def _offload_copy(src: torch.Tensor, dst: torch.Tensor) -> None:
    # Device to pinned host memory: asynchronous, and capturable in a CUDA graph. Inside
    # Inductor's code this stays one call: a copy_ to a host input would become a device copy
    # to pageable memory plus a host kernel, which a CUDA graph capture cannot replay.
    dst.copy_(src, non_blocking=True)


# ``src`` comes first: Inductor takes an extern call's device from its first tensor, and the
# copy is the device's work (on its stream), not the host's.
_LIB.define("offload_copy(Tensor src, Tensor(a!) dst) -> ()",
            # The rewrite laid both sides out as one dense block in memory order; Inductor must
            # hand over ``src`` with exactly those strides, or the copy goes through a pageable
            # temporary (synchronous, and refused by a capture).
            tags=tuple(t for t in (getattr(torch.Tag, "needs_exact_strides", None),) if t))
_LIB.impl("offload_copy", _offload_copy, "CompositeExplicitAutograd")
torch.library.register_fake("fxslots::offload_copy", _nothing, lib=_LIB)
offload_copy = torch.ops.fxslots.offload_copy.default
