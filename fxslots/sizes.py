"""A value's sizes as the planner and the runtime share them: ints, or sympy expressions of
its symbolic sizes, which the runtime evaluates per shape. Read off the expressions, never
compared as SymInts: that would add guards on the sizes Dynamo left free."""

from __future__ import annotations

import math
from typing import Any, Mapping

import sympy
import torch
import torch.fx as fx

from .costs import allocated_bytes
from .geometry import Number, evaluate, row_major, span_elements
from .schemas import expr


def sizes_of(v: torch.Tensor) -> tuple[Number, tuple]:
    """(bytes, (dtype, shape, stride)) of a value: ints, or sympy expressions where its sizes
    are symbolic (the runtime evaluates them per shape)."""
    shape, stride = tuple(map(_exact, v.shape)), tuple(map(_exact, v.stride()))
    return span_elements(shape, stride) * v.dtype.itemsize, (v.dtype, shape, stride)


def rows_dense(v: torch.Tensor) -> bool:
    """Whether ``v``'s strides are row-major for its sizes at every shape
    (``geometry.row_major`` on the expressions; ``is_contiguous()`` would add guards)."""
    _, (_, shape, stride) = sizes_of(v)
    return row_major(shape, stride)


def format_dense(v: torch.Tensor) -> bool:
    """Whether ``v`` is dense in a memory format at every shape: row-major, or channels-last
    (its dimension 1 innermost) where it has 4 or 5 dimensions."""
    _, (_, shape, stride) = sizes_of(v)
    last = [0, *range(2, len(shape)), 1]
    return row_major(shape, stride) or (len(shape) in (4, 5) and row_major(
        [shape[i] for i in last], [stride[i] for i in last]))


def same_geometry(u: Any, v: Any) -> bool:
    """Whether values ``u`` and ``v`` are tensors of one dtype, device, shape and stride, as
    expressions: comparing symbolic sizes themselves would add guards."""
    return (isinstance(u, torch.Tensor) and isinstance(v, torch.Tensor) and u.dtype == v.dtype
            and u.device == v.device and sizes_of(u)[1] == sizes_of(v)[1])


def _exact(x: Any) -> Number:
    e = expr(x)
    return int(e) if e.is_Integer else e


def at(x: Number, values: Mapping[str, int]) -> int:
    """``x`` with its symbols at ``values`` (symbol name -> value, ``ViewLayout.values``)."""
    if isinstance(x, int):
        return x
    return evaluate(x, {s: values[s.name] for s in sympy.sympify(x).free_symbols})


def bytes_at(node: fx.Node, values: Mapping[str, int] | None) -> int:
    """``costs.allocated_bytes`` of ``node`` at one shape (``values``), or at shape hints."""
    if values is None:
        return allocated_bytes(node)
    v = node.meta.get("val")
    return sum(at(math.prod(map(_exact, t.shape)) * t.element_size(), values)
               for t in (v if isinstance(v, (tuple, list)) else (v,))
               if isinstance(t, torch.Tensor))
