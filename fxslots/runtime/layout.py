"""Where things are in an arena at one concrete shape, and the tensors that view them.

The plan's sizes and offsets are sympy expressions; ``SymbolBinder`` reads each symbol's value
from a forward's arguments and ``layout_of`` evaluates the plan once per shape (callers cache).
``make_views`` builds the tensors.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import sympy
import torch

from .. import _torch
from ..geometry import align_up, span_elements
from ..schemas import ArenaPlan, evaluate

Geometry = tuple  # (dtype, element offset, shape, stride) of one view over an arena
STAGED = -1  # ViewLayout.groups' group id of a staged input's bytes

_CPU = torch.device("cpu")


@dataclass(frozen=True)
class ViewLayout:
    """A plan evaluated at one concrete shape: arena bytes and the geometry of every view."""

    key: tuple  # the symbol values it was evaluated at
    nbytes: int
    host_nbytes: int
    views: tuple[Geometry, ...]
    staging: tuple[Geometry, ...] = ()
    host_views: tuple[Geometry, ...] = ()
    # (byte offset, bytes, storage group) of every group in the device arena, and of each
    # staged input (group STAGED: saved views of inputs live in them)
    groups: tuple[tuple[int, int, int], ...] = ()

    @functools.cached_property
    def view_runs(self) -> tuple[tuple, ...]:
        return view_runs(self.views)

    @functools.cached_property
    def values(self) -> dict[str, int]:
        """Each shape symbol's value here, by name (what ``Overlay.at`` evaluates sizes at)."""
        return dict(self.key)

    @functools.cached_property
    def host_view_runs(self) -> tuple[tuple, ...]:
        return view_runs(self.host_views)


class SymbolBinder:
    """Reads the value of each shape symbol from a forward's runtime arguments."""

    def __init__(self, placeholders: Sequence[torch.fx.Node]):
        self.read: dict[sympy.Symbol, Callable[[Sequence[Any]], int]] = {}
        self.hints: dict[sympy.Symbol, int] = {}  # each symbol's value at the compiled shape
        for i, p in enumerate(placeholders):
            v = p.meta.get("val")
            if isinstance(v, torch.SymInt) and _torch.symbol_of(v) is not None:
                self._bind(v, lambda a, i=i: int(a[i]))
            elif isinstance(v, torch.Tensor):
                for d, s in enumerate(v.shape):
                    self._bind(s, lambda a, i=i, d=d: a[i].shape[d])

    def _bind(self, size: Any, read: Callable[[Sequence[Any]], int]) -> None:
        sym = _torch.symbol_of(size)
        if sym is not None and sym not in self.read:
            self.read[sym], self.hints[sym] = read, _torch.size_hint(size)

    def missing(self, exprs: Sequence[sympy.Expr]) -> set[sympy.Symbol]:
        syms = set().union(*(e.free_symbols for e in exprs)) if exprs else set()
        return {s for s in syms if s not in self.read}

    def bind(self, args: Sequence[Any]) -> dict[sympy.Symbol, int]:
        return {s: r(args) for s, r in self.read.items()}

    def key(self, args: Sequence[Any]) -> tuple[int, ...]:
        """The symbols' values, in ``read`` order: what layouts are cached by."""
        return tuple(r(args) for r in self.read.values())


def layout_of(plan: ArenaPlan, env: dict[sympy.Symbol, int]) -> ViewLayout:
    def geometry(views):
        return tuple((v.dtype, evaluate(v.storage_offset, env),
                      tuple(evaluate(x, env) for x in v.shape),
                      tuple(evaluate(x, env) for x in v.stride)) for v in views)

    n_host = plan.host_view_count
    n_dev = len(plan.views) - n_host
    staging = geometry(plan.staging)
    return ViewLayout(key=tuple(sorted((str(k), v) for k, v in env.items())),
                      nbytes=max(evaluate(plan.capacity, env), 1),
                      # a zero-size batch's host views still need an arena to view
                      host_nbytes=max(evaluate(plan.host_capacity, env), min(n_host, 1)),
                      views=geometry(plan.views[:n_dev]), staging=staging,
                      host_views=geometry(plan.views[n_dev:]),
                      groups=tuple((evaluate(p.offset, env), evaluate(p.nbytes, env), p.group)
                                   for p in plan.placements if p.write.owns_bytes)
                      + tuple((off * d.itemsize, span_elements(shape, stride) * d.itemsize,
                               STAGED) for d, off, shape, stride in staging))


def make_views(alias: Any, device: torch.device, geometry, runs=None) -> list[torch.Tensor]:
    """Tensors over ``alias`` with the given (dtype, element offset, shape, stride).

    Runs of equal dtype, shape and stride at evenly spaced offsets (a layer stack's saved
    activations) are made by one as_strided and an unbind: this runs at every forward.
    Pass ``runs=view_runs(geometry)`` when the geometry repeats, to skip regrouping.
    """
    bases: dict[torch.dtype, torch.Tensor] = {}
    out: list[torch.Tensor] = []
    for dtype, start, shape, stride, step, n in runs if runs is not None else view_runs(geometry):
        base = bases.get(dtype)
        if base is None:  # one typed tensor per dtype; as_strided is ~4x cheaper than set_
            base = bases[dtype] = torch.empty(0, dtype=dtype, device=device).set_(alias)
        if n == 1:
            out.append(base.as_strided(shape, stride, start))
        else:
            out.extend(base.as_strided((n, *shape), (step, *stride), start).unbind(0))
    return out


def view_runs(geometry) -> tuple[tuple, ...]:
    """Group consecutive (dtype, offset, shape, stride) with a constant offset step."""
    runs: list[list] = []
    for dtype, off, shape, stride in geometry:
        if runs:
            r = runs[-1]
            same = r[0] == dtype and r[2] == shape and r[3] == stride
            if same and r[5] == 1 and off > r[1]:
                r[4], r[5] = off - r[1], 2
                continue
            if same and r[5] > 1 and off == r[1] + r[4] * r[5]:
                r[5] += 1
                continue
        runs.append([dtype, off, tuple(shape), tuple(stride), 0, 1])
    return tuple(tuple(r) for r in runs)


def grouped_runs(indices: Sequence[int], geometry: Sequence[Geometry]
                 ) -> tuple[list[int], tuple[tuple, ...]]:
    """``indices`` (one per geometry) reordered so that views of one dtype, shape and stride
    come together in offset order, and the ``view_runs`` of their geometry in that order. A
    backward's gradients placed in the holes its reads freed lie at offsets that step down and
    jump (20 runs for 24 layers' weights: an as_strided each, at every replay), but fill a few
    evenly spaced blocks once sorted (3)."""
    order = sorted(range(len(indices)), key=lambda k: (
        str(geometry[k][0]), geometry[k][2], geometry[k][3], geometry[k][1]))
    return [indices[k] for k in order], view_runs([geometry[k] for k in order])


def geometry_of(t: torch.Tensor) -> Geometry:
    return (t.dtype, t.storage_offset(), tuple(t.shape), t.stride())


def slot_views(layout: ViewLayout, aliases: tuple[Any, Any], device: torch.device) -> list[Any]:
    """The forward graph's extra inputs: device arena views, then host arena views."""
    alias, host_alias = aliases
    views = make_views(alias, device, layout.views, layout.view_runs)
    if layout.host_views:
        views += make_views(host_alias, _CPU, layout.host_views, layout.host_view_runs)
    return views


def pack(shapes: Sequence[tuple[torch.dtype, tuple[int, ...], tuple[int, ...]]],
         alignment: int) -> tuple[list[Geometry], int]:
    """Lay (dtype, shape, stride) tensors end to end in one byte buffer, each start aligned:
    the geometry for ``make_views`` and the bytes needed."""
    geometry, offset = [], 0
    for dtype, shape, stride in shapes:
        item = dtype.itemsize
        offset = align_up(offset, alignment)
        geometry.append((dtype, offset // item, tuple(shape), tuple(stride)))
        offset += span_elements(shape, stride) * item
    return geometry, offset
