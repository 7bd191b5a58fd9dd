"""Custom operators that let Inductor keep what fxslots puts in its graphs (kernels="inductor").

Inductor has no lowering for out= overloads ("out= ops aren't yet supported"); an op it runs as
an ATen call (a matmul, a convolution, one of its fallbacks) returns a fresh buffer, so a
``copy_`` of its result into a graph input costs a copy kernel; and it cannot lower the plain
Python functions of ``fxslots.streams`` (side-stream copies, which return events). These
``torch.library`` operators stand in for them: each declares what it writes (``Tensor(a!)``),
so Inductor calls it as one extern kernel, never drops it as dead code, and orders every later
reader of what it wrote after it (and it after every earlier reader).

``into_op`` defines its operators on first use, one per out= overload met.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from . import _torch, streams
from .geometry import span_elements

aten = torch.ops.aten

# Inductor calls these as ATen (extern) kernels, which allocate their result: they get an
# ``fxslots::*_into`` op that writes the slot instead. (With max-autotune Inductor may pick a
# Triton template for a matmul; writing into the slot takes that choice away.)
_MATMULS = frozenset({aten.mm, aten.addmm, aten.bmm, aten.baddbmm, aten.convolution,
                      aten._int_mm})


def runs_as_call(op: Any) -> bool:
    """Whether Inductor runs ``op`` as an ATen call rather than generating its kernel."""
    return op.overloadpacket in _MATMULS or _torch.inductor_falls_back(op)


_LIB = torch.library.Library("fxslots", "FRAGMENT")
_INTO: dict[str, _torch.OpOverload] = {}


def into_op(out_overload: _torch.OpOverload) -> _torch.OpOverload:
    """``fxslots::<op>_<overload>_into``: the arguments of ``out_overload``, returning nothing,
    so that Inductor accepts it (it refuses ops that return an alias of an input)."""
    schema = _torch.op_schema(out_overload)
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


# ``streams`` hands an event (or a reload handle) from the op that forks a side stream to the op
# that joins it; an operator cannot return one, so it waits here, under the address of what
# the copy writes, from one call to the other (inside a capture: at capture time).
_PENDING: dict[int, Any] = {}


def _define(schema: str, fn: Any, fake: Any = _nothing) -> Any:
    name = schema.split("(")[0]
    _LIB.define(schema)
    _LIB.impl(name, fn, "CompositeExplicitAutograd")
    torch.library.register_fake(f"fxslots::{name}", fake, lib=_LIB)
    return getattr(torch.ops.fxslots, name).default


def _offload_start(src: torch.Tensor, host: torch.Tensor) -> None:
    _PENDING[host.data_ptr()] = streams.offload(host, src)


def _offload_join(src: torch.Tensor, host: torch.Tensor) -> None:
    streams.offload_wait(src, _PENDING.pop(host.data_ptr(), None))


def _reload(members: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    return list(_start_reload(members, device).members)


def _reload_span(members: list[torch.Tensor], device: torch.device, length: int) -> torch.Tensor:
    return _start_reload(members, device).span


def _start_reload(members: list[torch.Tensor], device: torch.device) -> streams.Reload:
    handle = streams.reload(device, *members)  # its join finds it by the span's address
    _PENDING[handle.span.untyped_storage().data_ptr()] = handle
    return handle


def _reload_fake(members: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """Each member's geometry in the reloaded span, offset included (Inductor decides from it
    whether a kernel may assume the member aligned)."""
    lo = _lowest_offset(members)
    return [torch.empty(m.storage_offset() - lo + span_elements(m.shape, m.stride()),
                        dtype=m.dtype, device=device).as_strided(
                            m.shape, m.stride(), m.storage_offset() - lo) for m in members]


def _reload_span_fake(members: list[torch.Tensor], device: torch.device,
                      length: int) -> torch.Tensor:
    """``length``: the span's elements, fixed when the graph was lowered. Read off the
    members' offsets here it would be wrong under Inductor, which lays every input of its
    graph out at offset 0 (``q, k, v = qkv(x).split(...)`` saved: 352 elements, not 384)."""
    return torch.empty(length, dtype=members[0].dtype, device=device)


def _lowest_offset(members: list[torch.Tensor]) -> Any:
    """``sym_min``: no guard on symbolic offsets."""
    return functools.reduce(torch.sym_min, [m.storage_offset() for m in members])


def _reload_join(members: list[torch.Tensor]) -> None:
    handle = _PENDING.pop(members[0].untyped_storage().data_ptr(), None)
    if handle is not None:
        streams.reload_wait(handle)


# The value goes first: Inductor takes an extern call's device from its first tensor, and the
# copy is the device's work. The join "writes" the host view so that it runs after the copy
# started and is never dropped; it reads the value, which Inductor then keeps until the join.
offload_start = _define("offload_start(Tensor src, Tensor(a!) host) -> ()", _offload_start)
offload_join = _define("offload_join(Tensor src, Tensor(a!) host) -> ()", _offload_join)
# The reload returns the members as views of one fresh device buffer; its join "writes" them,
# so every reader comes after it. Inductor takes each returned tensor for a buffer of its own
# (and may reuse one's bytes while another is read), so only members that share no bytes go
# through ``reload``; a group whose members alias comes back through ``reload_span``, its members
# views of the one returned buffer.
reload = _define("reload(Tensor[] members, Device device) -> Tensor[]", _reload, _reload_fake)
reload_span = _define("reload_span(Tensor[] members, Device device, int length) -> Tensor",
                      _reload_span, _reload_span_fake)
reload_join = _define("reload_join(Tensor(a!)[] members) -> ()", _reload_join)
# Writes nothing: it declares ``buffer`` and ``dead`` written so that Inductor runs it after
# every read of ``dead`` and before the next write of ``buffer`` (``passes/fence.py``: a
# gradient computed into arena bytes it shares with them). Inductor lowers it after realizing
# every pending read of ``dead`` (``_torch.lower_after_reads``).
fence = _define("fence(Tensor(a!) buffer, Tensor(b!)[] dead) -> ()", _nothing)
