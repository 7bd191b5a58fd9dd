"""What a captured graph hands back after each replay, output by output."""

from __future__ import annotations

import enum
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from ... import _torch, state
from ...geometry import contiguous_strides
from ..layout import Geometry, geometry_of, grouped_runs, make_views, pack

_CPU = torch.device("cpu")


class OutKind(enum.Enum):
    CONST = "const"  # not a tensor (the same object at every replay), or a view of a parameter
    # (a new alias of it at each: autograd sets a differentiable output's grad_fn on the very
    # object, and one object would keep the last forward's graph and slot alive)
    SLOT = "slot"  # a view of the slot's device arena, rebuilt over each forward's alias
    HOST = "host"  # a view of the slot's host arena, the same way
    BUFFER = "buffer"  # a view of an output buffer (a backward's gradients: the region's; a
    # forward's outputs: its slot's), rebuilt over each call's alias
    ARENA_GRADS = "arena grads"  # a gradient in its slot's arena (cudagraphs.delivery), the same
    POOL = "pool"  # pool memory a later replay reuses: copied out for the caller


# The kinds handed out as views of an alias, in the order of results()' aliases and delivered.
_VIEWED = (OutKind.SLOT, OutKind.HOST, OutKind.BUFFER, OutKind.ARENA_GRADS)


@dataclass(frozen=True)
class ParamView:
    """A CONST output over a static input's bytes (a parameter the forward saves, or a view of
    one), held weakly: a capture that held the tensor kept its model alive, and with it the
    region's arenas and graphs, once the model was deleted (found by a review)."""

    ref: Any  # weakly, the static input (parameter, buffer) whose storage it views
    storage: Any  # its storage: a buffer rebound at the same address outlives the old tensor
    dtype: torch.dtype
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int

    @classmethod
    def of(cls, o: torch.Tensor, static: torch.Tensor) -> "ParamView":
        return cls(weakref.ref(static), o.untyped_storage(), o.dtype, tuple(o.shape),
                   o.stride(), o.storage_offset())

    def alias(self) -> torch.Tensor:
        """A new alias at each replay (autograd sets a differentiable output's grad_fn on the
        object it gets); through ``detach``, it shares the parameter's version counter."""
        p = self.ref()
        if p is None:
            return torch.empty(0, dtype=self.dtype, device=self.storage.device).set_(
                self.storage, self.offset, self.size, self.stride)
        return p.detach().as_strided(self.size, self.stride, self.offset)


@dataclass(frozen=True)
class Out:
    kind: OutKind
    value: Any = None  # CONST: the value (a ParamView); POOL: a non-owning view of the pool
    geometry: Geometry | None = None  # SLOT, HOST, GRADS, ARENA_GRADS


@dataclass
class Captured:
    """One captured graph and how to replay it."""

    graph: Any
    static: tuple[tuple[int, int], ...]  # (argument, data_ptr) of inputs not staged by fxslots
    stage: tuple[tuple[int, torch.Tensor], ...]  # (argument, where replays copy it to)
    outs: list[Out]
    writeback: tuple[tuple[int, torch.Tensor], ...] = ()  # staged inputs the graph mutates
    # Pool outputs copied each into an allocation of its own (what a forward hands the caller:
    # views of one buffer shared a version counter and a lifetime, and autograd refused an
    # in-place change to one); False: one buffer for all (a backward's gradients)
    own: bool = True
    _pool: tuple = field(default=([], ()), init=False)  # the pool outputs, their copies' runs
    _viewed: list = field(default_factory=list, init=False)
    _collapse: tuple = field(default=(None, None), init=False)  # (Collapse, outputs kept)
    _values: list = field(default_factory=list, init=False)  # what results() starts from
    _static: tuple = field(default=((), ()), init=False)  # static's indices, its data_ptrs
    _params: list = field(default_factory=list, init=False)  # ParamViews' indices

    # (output index, kind, geometry) of each output in the slot's arenas: what
    # ``results(..., tokens=True)`` hands out as one token per arena.
    saved_outs: tuple[tuple[int, OutKind, Geometry], ...] = field(default=(), init=False)
    tokens_ok: bool | None = None  # the executor's verdict: may this forward hand out tokens

    def __post_init__(self) -> None:
        self._static = ([i for i, _ in self.static], [ptr for _, ptr in self.static])
        self._values = [o.value for o in self.outs]
        self._params = [j for j, o in enumerate(self.outs)
                        if o.kind is OutKind.CONST and isinstance(o.value, ParamView)]
        self.saved_outs = tuple((j, o.kind, o.geometry) for j, o in enumerate(self.outs)
                                if o.kind in (OutKind.SLOT, OutKind.HOST))
        # Grouped once here, not at every replay.
        # (kind, which alias of results' sources, indices, runs, a slice when the indices
        # are consecutive) of each kind present: results() loops over these alone
        self._viewed = []
        for at, kind in enumerate(_VIEWED):
            idx = [j for j, o in enumerate(self.outs) if o.kind is kind]
            if idx:
                lo, hi = min(idx), max(idx)
                span = slice(lo, hi + 1) if hi - lo == len(idx) - 1 else None
                self._viewed.append((kind, at, *grouped_runs(
                    idx, [self.outs[j].geometry for j in idx]), span))
        pool = [j for j, o in enumerate(self.outs) if o.kind is OutKind.POOL]
        values = [self.outs[j].value for j in pool]
        geometry, self.pool_nbytes = pack(
            [(v.dtype, tuple(v.shape), copy_strides(v)) for v in values], 16)
        self._pool = grouped_runs(pool, geometry)

    def tokens_for(self, saved_backward_args: dict[int, int] | None) -> bool:
        """Whether this forward's saved outputs can go to autograd as arena tokens: its
        backward is compiled and knows where each of them arrives."""
        if self.tokens_ok is None and saved_backward_args is not None:
            self.tokens_ok = bool(self.saved_outs) and all(
                j in saved_backward_args for j, _, _ in self.saved_outs)
        return bool(self.tokens_ok)

    def moved(self, args: list[Any]) -> int | None:
        """The first argument not staged by fxslots whose address differs from the capture's
        (a replay would read stale memory there); None when all are in place."""
        indices, ptrs = self._static  # at every replay: one comprehension, compared at once
        if [args[i].data_ptr() for i in indices] == ptrs:
            return None
        return next(i for i, ptr in self.static if args[i].data_ptr() != ptr)

    def results(self, aliases: tuple[Any, Any], device: torch.device,
                out: Any = None, tokens: bool = False, delivered: tuple = (None, None),
                collapse: Any = None) -> list[Any]:
        """The outputs of the replay just made, as the caller may keep them; pool outputs are
        copied into ``out`` (an OutputBuffer), or into fresh memory when it is None.
        ``delivered``: the aliases of the output buffer and of the slot's arena the replay
        delivered results into (``delivery.Target``; a forward's: its slot's output buffer's).

        ``tokens``: every output in one of the slot's arenas (a saved tensor) is handed out as
        one tensor over that arena's whole alias (the same object at each of them), not as
        views of it. Only a backward that replays reads them, and it reads the slot at
        addresses its capture holds; a backward that runs uncaptured rebuilds the views from
        ``saved_outs``. A saved view costs autograd a tensor and a detach, ~2 us each: dozens
        per forward. ``collapse`` (with tokens; ``runtime.collapse``): one token per arena, the
        other places left out, where this capture's saved outputs are the ones it expects."""
        result = self._values.copy()
        for j in self._params:
            result[j] = result[j].alias()
        if self._pool[0]:
            self._copy_out(result, device, out)
        sources = (aliases[0], aliases[1], delivered[0], delivered[1])
        for kind, at, idx, runs, span in self._viewed:
            where = _CPU if kind is OutKind.HOST else device
            if tokens and kind in (OutKind.SLOT, OutKind.HOST):  # the saved ones
                token = torch.empty(0, dtype=torch.uint8, device=where).set_(sources[at])
                if span is not None:
                    result[span] = [token] * len(idx)
                else:
                    for j in idx:
                        result[j] = token
            else:
                views = make_views(sources[at], where, None, runs)
                if self.own and kind is OutKind.BUFFER:  # the caller's: not views of one base
                    views = [_unviewed(v) for v in views]
                for j, v in zip(idx, views, strict=True):
                    result[j] = v
        kept = None if collapse is None else self._kept(collapse)
        return result if kept is None else [result[j] for j in kept]

    def _kept(self, collapse: Any) -> tuple[int, ...] | None:
        """The outputs handed over under ``collapse``, or None where this capture's saved
        outputs differ from the ones it leaves out of (checked once per capture)."""
        if self._collapse[0] is not collapse:
            held = frozenset((j, k is OutKind.HOST) for j, k, _ in self.saved_outs)
            ok = held == collapse.members
            kept = tuple(j for j in range(len(self.outs)) if j not in collapse.dropped)
            self._collapse = (collapse, kept if ok else None)
        return self._collapse[1]

    def _copy_out(self, result: list[Any], device: torch.device, out: Any) -> None:
        """The pool outputs copied into ``out`` (an OutputBuffer) or fresh memory."""
        pool, runs = self._pool
        state.counters["pool_bytes_copied_out"] += self.pool_nbytes
        if out is None and (self.own or len(pool) == 1):  # one allocation each, one copy
            values = [self.outs[j].value for j in pool]
            copies = [torch.empty_strided(v.shape, copy_strides(v), dtype=v.dtype, device=device)
                      for v in values]
            _torch.foreach_copy_(copies, values)
            for j, c in zip(pool, copies, strict=True):
                result[j] = c
            return
        # One buffer and one multi-tensor copy for all outputs (gradients, mostly), instead
        # of a clone each: the caller owns them, the pool bytes are free again.
        storage = (out.alias(self.pool_nbytes, device) if out is not None else torch.empty(
            max(self.pool_nbytes, 1), dtype=torch.uint8, device=device).untyped_storage())
        copies = make_views(storage, device, None, runs)
        _torch.foreach_copy_(copies, [self.outs[j].value for j in pool])
        for j, c in zip(pool, copies, strict=True):
            result[j] = c


def _unviewed(v: torch.Tensor) -> torch.Tensor:
    """``v``'s bytes as a tensor that is no view of another: autograd lets its holder change it
    in place, and it counts versions of its own."""
    return torch.empty(0, dtype=v.dtype, device=v.device).set_(
        v.untyped_storage(), v.storage_offset(), v.shape, v.stride())


def copy_strides(v: torch.Tensor) -> tuple[int, ...]:
    """The strides a copy of ``v`` the caller owns gets: its own, unless elements share
    memory (an expanded output), which a copy cannot write: then dense ones."""
    return contiguous_strides(v.shape) if _torch.overlaps(v) else v.stride()


def describe_outputs(outs: Any, gargs: list[Any], arenas: dict[int, OutKind],
                     staged: set[int], copied: int = 0) -> list[Out]:
    """Classify each output of a capture. ``arenas`` maps the data_ptr of the slot's arenas
    and of the output buffer the graph delivers into to their kind; ``staged`` holds the
    data_ptrs of buffers fxslots stages inputs into (never a caller's own memory). The first
    ``copied`` outputs go to the caller, who may keep them past the slot's next use: each
    replay copies them out, from the pool or from the slot (not from an output buffer, which
    is not written again while the caller holds them)."""
    static = {a.untyped_storage().data_ptr(): a for a in reversed(gargs)
              if isinstance(a, torch.Tensor)}
    for ptr in (*staged, *arenas):
        static.pop(ptr, None)
    described = []
    for j, o in enumerate(outs):
        if not isinstance(o, torch.Tensor):
            described.append(Out(OutKind.CONST, o))
            continue
        st = o.untyped_storage()
        kind = arenas.get(st.data_ptr())
        if j < copied and kind in (OutKind.SLOT, OutKind.HOST):
            kind = None
        if kind is not None:
            # storage_offset, not data_ptr: a zero-size tensor's data_ptr is 0
            described.append(Out(kind, geometry=geometry_of(o)))
        elif st.data_ptr() in static:  # a parameter, or a view of one
            described.append(Out(OutKind.CONST, ParamView.of(o, static[st.data_ptr()])))
        else:
            alias = _torch.storage_alias(st.data_ptr(), o.device, st.nbytes())
            view = torch.empty(0, dtype=o.dtype, device=o.device).set_(
                alias, o.storage_offset(), tuple(o.shape), o.stride())
            described.append(Out(OutKind.POOL, view))
    return described


def own_user_outputs(outs: Any, n: int, arenas: tuple[Any, ...]) -> Any:
    """``outs`` of a forward run uncaptured, with each of its first ``n`` (the caller's) that
    lies in one of the slot's ``arenas`` copied out (``copy_strides``): the slot is written
    again at its next forward, and the plan wrote such values there (``outputs_copied``)."""
    ptrs = {a.data_ptr() for a in arenas if a is not None}
    outs = list(outs)
    for j in range(n):
        o = outs[j]
        if isinstance(o, torch.Tensor) and o.untyped_storage().data_ptr() in ptrs:
            outs[j] = torch.empty_strided(o.shape, copy_strides(o), dtype=o.dtype,
                                          device=o.device).copy_(o)
    return outs


def saved_views(backward_args: dict[int, int], saved_outs, gargs: list[Any]) -> None:
    """Replace the arena tokens among a backward's arguments by the views they stand for
    (``backward_args``: forward output index -> backward argument index)."""
    for j, kind, geometry in saved_outs:
        i = backward_args[j]
        where = _CPU if kind is OutKind.HOST else gargs[i].device
        gargs[i] = make_views(gargs[i].untyped_storage(), where, [geometry])[0]
