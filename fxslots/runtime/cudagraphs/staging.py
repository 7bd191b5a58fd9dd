"""Device buffers a region's backward replays share: where they stage their inputs, and where
they copy the gradients they hand out."""

from __future__ import annotations

import itertools
import weakref
from typing import Any, Callable

import torch

from ... import _torch, state
from ...geometry import contiguous_strides, span_elements
from ..layout import Geometry, make_views, pack, view_runs
from ..alloc import lasting


class StagingBuffer:
    """Device bytes at a stable address for the tangents and reloaded groups of backward
    replays. One per region, shared by its variants: backward replays run one at a time and
    consume what they stage before the next one stages. Listeners hear when it moves."""

    def __init__(self) -> None:
        self.tensor: torch.Tensor | None = None
        self.generation = 0
        self._listeners: list[weakref.WeakMethod] = []

    def subscribe(self, listener: Callable[[], None]) -> None:
        self._listeners.append(weakref.WeakMethod(listener))

    def views(self, geometry: list[Geometry], nbytes: int,
              device: torch.device) -> list[torch.Tensor]:
        if self.tensor is None or self.tensor.numel() < nbytes or self.tensor.device != device:
            self._moved()
            self.tensor = lasting(nbytes, device)
        return make_views(self.tensor.untyped_storage(), device, geometry)

    def free(self) -> None:
        if self.tensor is not None:
            self._moved()

    def _moved(self) -> None:
        self.tensor = None  # free it before a bigger one is allocated
        self.generation += 1
        self._listeners = [w for w in self._listeners if w() is not None]
        for w in self._listeners:
            w()()


# After this many times the caller still held the gradients of one backward when the next
# came (each a new buffer, and a capture), a region's backwards stop delivering gradients into
# it (passes/deliver.py) and copy them out instead; after this many forwards that found both of
# their slot's output buffers held (``OutputBanks``), that slot's forwards copy theirs out.
HELD_LIMIT = 2

# Generations of every output buffer, unique across buffers: a capture key's ``delivers``
# names one buffer's one allocation, so a slot's two buffers (``OutputBanks``) never share one.
_generations = itertools.count(1)


class OutputBuffer:
    """Device bytes where a region's backward replays copy the gradients they hand out (or a
    slot's forwards their outputs: ``OutputBanks``).

    Reused once nothing holds the last ones (a training loop drops them at
    ``zero_grad(set_to_none=True)``), so the ``.grad`` buffers autograd adopts keep their
    addresses from step to step, and a backward that adds into them (captured with those
    addresses) replays instead of capturing again. Handed out as views of a fresh alias, whose
    weak reference tells when the last one died; a buffer still held when the next backward
    comes is retired (``state.viewed`` keeps it alive until its views die) and a new one made.
    """

    def __init__(self) -> None:
        self.tensor: torch.Tensor | None = None
        self.generation = 0  # a new tensor, at a new address: graphs that write it are stale
        self.held = 0  # how often one was retired because the caller still held it (a
        # backward's; a forward's buffers count in their OutputBanks)
        self._owner = None

    def alias(self, nbytes: int, device: torch.device):
        retired = self.kept()
        if retired:  # the caller keeps its views alive
            self.held += 1
            self.tensor = None
        self.ensure(nbytes, device, settle=not retired)
        alias = _torch.storage_alias(self.tensor.data_ptr(), device, max(nbytes, 1))
        self._owner = _torch.StorageWeakRef(alias)
        state.keep_while_viewed(self.tensor, self._owner)
        return alias

    def ensure(self, nbytes: int, device: torch.device, settle: bool = True) -> None:
        """At least ``nbytes`` on ``device``: a new allocation (generation) where it has not
        (``alloc.lasting``'s ``settle``)."""
        if self.tensor is None or self.tensor.numel() < nbytes or self.tensor.device != device:
            self.tensor = lasting(nbytes, device, settle)
            self.generation = next(_generations)

    def kept(self) -> bool:
        """Whether the caller still holds results last handed out from here."""
        return self._owner is not None and not self._owner.expired()

    @property
    def delivering(self) -> bool:
        """Whether graphs may still write their results into it themselves."""
        return self.held <= HELD_LIMIT

    def free(self) -> None:
        self.tensor = None  # what the caller still views stays alive (state.viewed)


class OutputBanks:
    """A slot's output buffers for its forwards' outputs: two, used in turn. The common loop
    ``out = model(x); ...; loss.backward()`` still holds the last output while the next forward
    runs (``out`` is rebound only when it returns), so one buffer is always held there; the
    other is free, and eager holds two outputs at that moment too. The second is allocated only
    when the first is held; each is a capture of its own (the key's ``delivers``)."""

    def __init__(self) -> None:
        self.banks = (OutputBuffer(), OutputBuffer())
        self.held = 0  # forwards that found both held (the plain graph copied their outputs)

    def next_free(self) -> OutputBuffer | None:
        """The first buffer the caller holds nothing of; None (counted) when it holds both."""
        free = next((b for b in self.banks if not b.kept()), None)
        if free is None:
            self.held += 1
        return free

    def unheld(self) -> OutputBuffer | None:
        """The first buffer the caller holds nothing of, not counted: a backward stages its
        tangents there (``banks.tangent_buffer``)."""
        return next((b for b in self.banks if not b.kept()), None)

    def holding(self, generation: int) -> OutputBuffer | None:
        """The buffer whose current allocation is ``generation``."""
        return next((b for b in self.banks if b.generation == generation), None)

    @property
    def delivering(self) -> bool:
        return self.held <= HELD_LIMIT

    def free(self) -> None:
        for b in self.banks:
            b.free()


def copy_staged(stage: tuple[tuple[int, torch.Tensor], ...], args: list[Any]) -> None:
    """One multi-tensor copy of each staged argument into its staging view. The view keeps the
    argument's strides; along a dimension both expand (stride 0, a broadcast attention mask)
    one slice is copied, since copy_ refuses a destination whose elements overlap."""
    if not stage:
        return
    dsts, srcs = [], []
    for i, dst in stage:
        src = args[i]
        if 0 in dst.stride():
            for dim, (a, b) in enumerate(zip(dst.stride(), src.stride(), strict=True)):
                if a == 0 and b == 0:
                    dst, src = dst.narrow(dim, 0, 1), src.narrow(dim, 0, 1)
        dsts.append(dst)
        srcs.append(src)
    _torch.foreach_copy_(dsts, srcs)


def write_back(args: list[Any], pairs) -> None:
    for i, staged in pairs:  # a staged input the graph mutated: the caller must see it
        args[i].copy_(staged)


def compact_grads(outs: Any, indices: Any) -> Any:  # indices: falsy for none
    """A warm-up backward's outputs with the parameters' gradients (at ``indices``) moved into
    one new buffer, in their own strides where dense.

    The warm-up (the uncaptured run before a capture) allocates its gradients in the default
    pool between its temporaries. A loop that keeps them (gradient accumulation,
    ``zero_grad(set_to_none=False)``) keeps them there for good, and no segment holding one can
    be released: llama-large under accum held 0.60 GiB of cached free memory no CUDA graph
    pool could use (H200 run 23b). The buffer is allocated once the temporaries' segments have
    gone back to the device. Gradients that record a graph (``create_graph=True``) stay, and so
    do all of them where the buffer does not fit."""
    if not isinstance(outs, (list, tuple)) or not indices:
        return outs
    grads = list(dict.fromkeys(  # one copy of a gradient returned twice
        outs[i] for i in indices if i < len(outs) and isinstance(outs[i], torch.Tensor)))
    if not grads or any(g.requires_grad for g in grads):
        return outs
    shapes = [(g.dtype, tuple(g.shape), g.stride() if _dense(g) else contiguous_strides(g.shape))
              for g in grads]
    geometry, nbytes = pack(shapes, 512)
    views = fresh_views(nbytes, view_runs(geometry), grads[0].device)
    if views is None:  # a second copy does not fit: they stay where they are
        return outs
    _torch.foreach_copy_(views, grads)
    moved, at = {id(g): v for g, v in zip(grads, views, strict=True)}, set(indices)
    out = [moved.get(id(o), o) if i in at else o for i, o in enumerate(outs)]
    return type(outs)(out) if isinstance(outs, tuple) else out


def fresh_views(nbytes: int, runs: Any, device: torch.device) -> list[torch.Tensor] | None:
    """Views (``runs``: ``layout.view_runs`` of their geometry) of one new buffer, allocated
    once the device's cached free segments went back, so that it shares none with a
    temporary; None where it does not fit."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
    try:
        buf = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=device)
    except torch.OutOfMemoryError:
        return None
    return make_views(buf.untyped_storage(), device, None, runs)


def _dense(t: torch.Tensor) -> bool:
    return span_elements(t.shape, t.stride()) == t.numel()


def aliased(buffer: Any, nbytes: int, device: Any, drop: Any) -> Any:
    """``buffer.alias(nbytes)``, dropping the graphs of its old generation where it moved."""
    return moving(buffer, drop, lambda: buffer.alias(nbytes, device))


def moving(buffer: Any, drop: Any, act: Any) -> Any:
    """``act()``; where that moved ``buffer``, ``drop`` forgets the graphs that deliver into
    its old generation or read tangents there (in every executor: ``GraphExecutor.
    _drop_everywhere``). Generations are unique across buffers (``_generations``): no graph
    that writes another buffer (the other of a slot's two, a forward's beside a backward's)
    is dropped."""
    old = buffer.generation
    result = act()
    if buffer.generation != old:
        _forget(drop, old)
    return result


def release(buffer: Any, drop: Any) -> None:
    """Free ``buffer`` unless the caller holds what it handed out; ``drop`` forgets the graphs
    of its generation, which no later tensor of it will have."""
    if buffer.tensor is not None and not buffer.kept():
        old = buffer.generation
        buffer.free()
        _forget(drop, old)


def _forget(drop: Any, old: int) -> None:
    drop(lambda k: old in (k.delivers, k.tangents_in))
