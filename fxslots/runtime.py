"""The slot ring and the forward/backward wrappers AOTAutograd calls.

A forward takes a free slot, hands its graph views of a fresh alias of the slot's arena, and
returns them as saved tensors. A slot is pending while any of those views lives (autograd holds
them until backward, longer with retain_graph=True); its backward, found by the address of its
saved tensors, gives it back. The same code runs on CPU and CUDA: only the executor differs.
"""

from __future__ import annotations

import functools
import gc
import itertools
import logging
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import sympy
import torch

from . import _torch
from .errors import ArenaLimitError, FxslotsError, SlotsExhaustedError
from .options import Options
from .schemas import ArenaPlan, SlotView, evaluate

log = logging.getLogger(__name__)


@dataclass
class Slot:
    """One in-flight microbatch's memory: a flat byte arena, reused by every variant."""

    index: int
    device: torch.device
    arena: torch.Tensor | None = None
    host_arena: torch.Tensor | None = None  # offloaded groups; pinned when the device is CUDA
    owner: Any = None  # weak reference to the alias storage of the forward holding the slot
    host_owner: Any = None  # the same for the host arena
    variant: str | None = None
    microbatch: int | None = None
    generation: int = 0  # bumps when the arena is reallocated (captured graphs go stale)
    layout: Any = None  # the ViewLayout of the forward holding the slot

    @property
    def nbytes(self) -> int:
        return 0 if self.arena is None else self.arena.numel()

    @property
    def host_nbytes(self) -> int:
        return 0 if self.host_arena is None else self.host_arena.numel()

    def pending(self) -> bool:
        return any(o is not None and not o.expired() for o in (self.owner, self.host_owner))

    def owns(self, t: torch.Tensor) -> bool:
        key = _torch.storage_key(t).cdata
        return any(o is not None and key == o.cdata for o in (self.owner, self.host_owner))


class SlotRing:
    """K slots shared by every variant of one compiled region (one Dynamo frame)."""

    def __init__(self, name: str, options: Options):
        self.name = name
        self.options = options
        self.slots: list[Slot] = []
        self.variants: list[Any] = []  # weak references to the Variants compiled for the region
        self._microbatches = itertools.count()
        self.grow_events = 0
        # CUDA graphs: where backward replays stage their tangents, shared by every variant
        # and slot (backward replays run one at a time and consume their tangents).
        self.bw_staging: torch.Tensor | None = None
        self.bw_staging_generation = 0

    def acquire(self, nbytes: int, device: torch.device, variant: str,
                host_nbytes: int = 0) -> tuple[Slot, Any, Any]:
        """A free slot whose arenas hold ``nbytes`` (device) and ``host_nbytes`` (host), and a
        fresh alias storage of each (None for an unused host arena).

        Raises before anything is written when every slot is pending or the arena limit is hit.
        """
        limit = self.options.max_arena_bytes
        if limit is not None and nbytes > limit:
            raise ArenaLimitError(
                f"fxslots: variant {variant} of {self.name} needs {nbytes} arena bytes per slot, "
                f"more than max_arena_bytes={limit}; raise the option 'max_arena_bytes' or "
                f"bound this input's shape")
        if not self.slots:
            self.slots = [Slot(i, device) for i in range(self.options.slots)]
        slot = self._free_slot(variant)
        if slot.device != device:
            raise FxslotsError(
                f"fxslots: {self.name} ran on {device} after {slot.device}; one compiled model "
                f"keeps its slots on one device (compile one model per device)")
        if slot.nbytes < nbytes:
            self._grow(slot, nbytes, variant)
        if slot.host_nbytes < host_nbytes:
            self._grow(slot, host_nbytes, variant, host=True)
        alias = _torch.storage_alias(slot.arena.data_ptr(), device, nbytes)
        slot.owner = _torch.StorageWeakRef(alias)
        host_alias = None
        if host_nbytes:
            host_alias = _torch.storage_alias(slot.host_arena.data_ptr(), torch.device("cpu"),
                                              host_nbytes)
        slot.host_owner = None if host_alias is None else _torch.StorageWeakRef(host_alias)
        slot.variant = variant
        slot.microbatch = next(self._microbatches)
        return slot, alias, host_alias

    def _free_slot(self, variant: str) -> Slot:
        free = [s for s in self.slots if not s.pending()]
        if not free:
            # A dropped autograd graph can sit in a reference cycle (AOTAutograd's double
            # backward keeps one) until the collector runs: collect once before refusing.
            gc.collect()
            free = [s for s in self.slots if not s.pending()]
        if not free:
            held = ", ".join(f"slot {s.index}: microbatch {s.microbatch} ({s.variant})"
                             for s in self.slots)
            raise SlotsExhaustedError(
                f"fxslots: a forward of {self.name} ({variant}) needs a slot, but all "
                f"{len(self.slots)} are pending a backward ({held}). Run a backward first, or "
                f"raise the option 'slots' (now {self.options.slots}) to the number of "
                f"microbatches your schedule keeps in flight")
        # Prefer a slot whose arena is already big enough: growing one invalidates its graphs.
        return max(free, key=lambda s: (s.nbytes, -s.index))

    def _grow(self, slot: Slot, nbytes: int, variant: str, host: bool = False) -> None:
        old = slot.host_nbytes if host else slot.nbytes
        try:
            if host:  # pinned, so copies to and from it can run asynchronously and be captured
                slot.host_arena = None
                slot.host_arena = torch.empty(nbytes, dtype=torch.uint8,
                                              pin_memory=slot.device.type == "cuda")
            else:
                slot.arena = None  # free the old arena first: it holds nothing live
                slot.arena = torch.empty(nbytes, dtype=torch.uint8, device=slot.device)
        except torch.OutOfMemoryError as e:
            raise ArenaLimitError(
                f"fxslots: growing slot {slot.index} of {self.name} to {nbytes} bytes for "
                f"{variant} ran out of memory ({e}). Earlier variants still run; lower the "
                f"batch or sequence size, or set 'max_arena_bytes' to refuse such variants "
                f"up front") from e
        slot.generation += 1
        self.grow_events += 1
        self.forget_graphs(slot.index)
        log.info("%s: slot %d %sarena grows %d -> %d bytes for %s", self.name, slot.index,
                 "host " if host else "", old, nbytes, variant)

    def forget_graphs(self, slot_index: int | None, direction: str | None = None) -> None:
        """Memory a captured graph points at moved: every variant's graphs of it are stale."""
        for ref in self.variants:
            v = ref()
            forget = getattr(getattr(v, "executor", None), "forget", None)
            if forget is not None:
                forget(slot_index, direction)

    def find(self, saved: torch.Tensor) -> Slot:
        """The slot whose current forward produced ``saved``."""
        for s in self.slots:
            if s.owns(saved):
                return s
        raise FxslotsError(
            f"fxslots: a backward of {self.name} got saved tensors from no pending slot; their "
            f"slot was reused, which should be impossible. Please report this with FXSLOTS_DEBUG=1")

    def release(self, slot: Slot) -> None:
        if self.options.debug:
            if slot.host_arena is not None and slot.device.type == "cuda":
                # The host is about to write bytes that a reload queued on the GPU may still
                # be reading.
                torch.cuda.current_stream(slot.device).synchronize()
            for arena in (slot.arena, slot.host_arena):
                if arena is not None:
                    arena.fill_(0xFF)  # all-ones bytes read as NaN in every float format
        slot.owner = slot.host_owner = None

    def pending(self) -> int:
        return sum(s.pending() for s in self.slots)


@dataclass(frozen=True)
class ViewLayout:
    """A plan evaluated at one concrete shape: arena bytes and (dtype, offset, shape, stride)."""

    key: tuple  # the symbol values it was evaluated at
    nbytes: int
    host_nbytes: int
    views: tuple[tuple[torch.dtype, int, tuple[int, ...], tuple[int, ...]], ...]
    staging: tuple[tuple[torch.dtype, int, tuple[int, ...], tuple[int, ...]], ...] = ()
    host_views: tuple[tuple[torch.dtype, int, tuple[int, ...], tuple[int, ...]], ...] = ()

    @functools.cached_property
    def view_runs(self) -> tuple[tuple, ...]:
        return view_runs(self.views)

    @functools.cached_property
    def host_view_runs(self) -> tuple[tuple, ...]:
        return view_runs(self.host_views)


class SymbolBinder:
    """Reads the value of each shape symbol from a forward's runtime arguments."""

    def __init__(self, placeholders: Sequence[torch.fx.Node]):
        self.read: dict[sympy.Symbol, Callable[[Sequence[Any]], int]] = {}
        for i, p in enumerate(placeholders):
            v = p.meta.get("val")
            if isinstance(v, torch.SymInt) and isinstance(v.node.expr, sympy.Symbol):
                self.read.setdefault(v.node.expr, lambda a, i=i: int(a[i]))
            elif isinstance(v, torch.Tensor):
                for d, s in enumerate(v.shape):
                    if isinstance(s, torch.SymInt) and isinstance(s.node.expr, sympy.Symbol):
                        self.read.setdefault(s.node.expr, lambda a, i=i, d=d: a[i].shape[d])

    def missing(self, exprs: Sequence[sympy.Expr]) -> set[sympy.Symbol]:
        syms = set().union(*(e.free_symbols for e in exprs)) if exprs else set()
        return {s for s in syms if s not in self.read}

    def bind(self, args: Sequence[Any]) -> dict[sympy.Symbol, int]:
        return {s: r(args) for s, r in self.read.items()}


def layout_of(plan: ArenaPlan, env: dict[sympy.Symbol, int]) -> ViewLayout:
    def ints(xs):
        return tuple(evaluate(x, env) for x in xs)

    def geometry(views):
        return tuple((v.dtype, evaluate(v.storage_offset, env), ints(v.shape), ints(v.stride))
                     for v in views)

    n_dev = len(plan.views) - plan.host_view_count
    return ViewLayout(key=tuple(sorted((str(k), v) for k, v in env.items())),
                      nbytes=max(evaluate(plan.capacity, env), 1),
                      host_nbytes=evaluate(plan.host_capacity, env),
                      views=geometry(plan.views[:n_dev]), staging=geometry(plan.staging),
                      host_views=geometry(plan.views[n_dev:]))


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


@dataclass
class Variant:
    """One compiled forward/backward pair of a region, and how it uses the region's slots."""

    name: str
    ring: SlotRing
    device: torch.device
    plan: ArenaPlan
    binder: SymbolBinder
    forward_graph: Callable[..., Any]
    backward_graph: Callable[..., Any] | None = None
    saved_arg_index: int | None = None  # a backward argument that is a slot view
    offloaded_args: list[list[int]] = field(default_factory=list)  # per offloaded group
    executor: Any = None  # runs graphs: eager on CPU, captured CUDA graphs on CUDA
    layouts: dict[tuple, ViewLayout] = field(default_factory=dict)

    def layout(self, args: Sequence[Any]) -> ViewLayout:
        env = self.binder.bind(args)
        key = tuple(env.values())
        lay = self.layouts.get(key)
        if lay is None:
            lay = self.layouts[key] = layout_of(self.plan, env)
        return lay

    def forward(self, args: list[Any]) -> Any:
        if not self.plan.views and not self.plan.staging:  # nothing to save, nothing to stage
            return self.executor.forward(self, None, args, None, None)
        lay = self.layout(args)
        slot, alias, host_alias = self.ring.acquire(lay.nbytes, self.device, self.name,
                                                    lay.host_nbytes)
        slot.layout = lay
        try:
            out = self.executor.forward(self, slot, args, lay, (alias, host_alias))
            del alias, host_alias
        except BaseException:
            self.ring.release(slot)
            raise
        return out

    def backward(self, args: list[Any]) -> Any:
        slot = None
        if self.saved_arg_index is not None:
            slot = self.ring.find(args[self.saved_arg_index])
        try:
            return self.executor.backward(self, slot, args)
        finally:
            if slot is not None and not _torch.keep_graph():
                self.ring.release(slot)


class EagerExecutor:
    """Runs the rewritten graphs as they are: CPU, or CUDA with cudagraphs=False."""

    def forward(self, variant: Variant, slot: Slot | None, args: list[Any],
                layout: ViewLayout | None, aliases: tuple[Any, Any]):
        views = [] if layout is None else slot_views(variant, layout, aliases)
        return variant.forward_graph(*args, *views)

    def backward(self, variant: Variant, slot: Slot | None, args: list[Any]):
        return variant.backward_graph(*reload(variant, args, lambda n, dtype, i: torch.empty(
            n, dtype=dtype, device=variant.device)))


def slot_views(variant: Variant, layout: ViewLayout, aliases: tuple[Any, Any]) -> list[Any]:
    """The forward graph's extra inputs: device arena views, then host arena views."""
    alias, host_alias = aliases
    views = make_views(alias, variant.device, layout.views, layout.view_runs)
    if layout.host_views:
        views += make_views(host_alias, torch.device("cpu"), layout.host_views,
                            layout.host_view_runs)
    return views


def offloaded_spans(variant: Variant, args: list[Any]) -> list[tuple[torch.dtype, int]]:
    """(dtype, elements) of each offloaded group's raw span, as ``reload`` copies it."""
    spans = []
    for idx in variant.offloaded_args:
        members = [args[i] for i in idx]
        lo, hi = _bounds(members)
        spans.append((members[0].dtype, hi - lo))
    return spans


def _bounds(members: list[torch.Tensor]) -> tuple[int, int]:
    """First and one-past-last element of the storage that any of ``members`` addresses."""
    return (min(m.storage_offset() for m in members),
            max(m.storage_offset() + _span(m) for m in members))


def reload(variant: Variant, args: list[Any], empty: Callable[[int, torch.dtype, int], Any]):
    """Backward arguments with each offloaded group copied back to the device in one piece
    (into ``empty(elements, dtype, group)``), its members rebuilt as views so aliases, strides
    and offsets survive."""
    if not variant.offloaded_args:
        return args
    args = list(args)
    for g, idx in enumerate(variant.offloaded_args):
        members = [args[i] for i in idx]
        dtype = members[0].dtype
        if any(m.dtype != dtype for m in members):  # views of one storage as several dtypes
            for i, m in zip(idx, members, strict=True):
                args[i] = torch.empty_strided(m.shape, m.stride(), dtype=m.dtype,
                                              device=variant.device).copy_(m)
            continue
        lo, hi = _bounds(members)
        dev = empty(hi - lo, dtype, g)
        dev.copy_(members[0].as_strided((hi - lo,), (1,), lo), non_blocking=True)
        for i, m in zip(idx, members, strict=True):
            args[i] = dev.as_strided(m.shape, m.stride(), dev.storage_offset()
                                     + m.storage_offset() - lo)
    return args


def span_elements(shape, stride) -> int:
    """Elements from a strided tensor's first addressed element to its last (0 when empty)."""
    if not all(shape):
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(shape, stride, strict=True))


def _span(t: torch.Tensor) -> int:
    return span_elements(t.shape, t.stride())


def pack(shapes: Sequence[tuple[torch.dtype, tuple[int, ...], tuple[int, ...]]],
         alignment: int) -> tuple[list[tuple], int]:
    """Lay (dtype, shape, stride) tensors end to end in one byte buffer, each start aligned:
    the geometry for ``make_views`` and the bytes needed."""
    geometry, offset = [], 0
    for dtype, shape, stride in shapes:
        item = dtype.itemsize
        offset = -(-offset // alignment) * alignment
        geometry.append((dtype, offset // item, tuple(shape), tuple(stride)))
        offset += span_elements(shape, stride) * item
    return geometry, offset


def boxed(fn: Callable[[list[Any]], Any]) -> Callable[[list[Any]], Any]:
    """AOTAutograd's boxed calling convention: one list argument."""

    def call(args: list[Any]) -> Any:
        return fn(list(args))

    call._boxed_call = True  # type: ignore[attr-defined]
    return call


def warn_fallback(reason: str, strict: bool) -> None:
    from .errors import UnsupportedGraphError

    msg = f"fxslots: this graph runs without slots: {reason}"
    if strict:
        raise UnsupportedGraphError(msg + " (strict=True)")
    warnings.warn(msg + " (set strict=True to make this an error)", stacklevel=3)
