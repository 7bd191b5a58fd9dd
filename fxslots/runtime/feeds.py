"""Which parameters a variant's forwards feed, and whether its backward may add their gradients
into ``.grad`` itself (``Variant.accumulate``'s graph) or must leave that to autograd.

Autograd sums every gradient a backward pass hands one parameter before it adds the sum to
``.grad`` once; a backward that adds its share itself rounds differently (an ulp off eager)
unless it is the parameter's only feeder in the pass. So a backward adds in the graph only where
no other feeder of its parameters runs in the pass: another forward of its region (``f(f(x))``,
a sum of microbatches' losses), another region's (a tied embedding across a graph break, a block
that moved to another compiled graph when the block below it froze), or code outside fxslots (a
weight penalty, an eager module tied to it), which only the accumulator's inputs show: a
backward that hands its gradients to autograd anyway (a ``.grad`` to create) watches them.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import _torch, state
from .region import Region
from .ring import Slot

log = logging.getLogger(__name__)
WATCH_FIRST, WATCH_EVERY = 4, 16  # Feeds.watch: backwards that make .grad and watch


def _dead() -> None:
    return None


def _fed_outside(params: list[Any]) -> bool:
    """Whether a watched pass saw code outside fxslots feed one of ``params``."""
    return any(state.OUTSIDE in state.accumulators.get(id(p), (None, ()))[1] for p in params)


@dataclass(eq=False)
class Feeds:
    """One variant's parameter sets (per slot: its forward's, weakly) and its last decisions."""

    name: str
    region: Region
    _params: dict[int, tuple] = field(default_factory=dict)
    _shared: tuple[int, bool] = (-1, False)  # (state.accumulators_version, a feeder is shared)
    _checked: Any = field(default_factory=_torch.CheckedGrads)  # the .grad buffers last checked
    _watching: list = field(default_factory=list)  # handles of watch's hooks
    _moments: int = 0  # backwards that hand gradients out and could watch
    _adds: int = 0  # backwards that add into .grad themselves (each may watch too)
    _rechecks: int = 0  # backwards that leave to autograd what an outside feeder fed
    # Per slot: its forward's static inputs by position, while the backward (so which of them
    # it feeds) is yet to be compiled: what the first backward watches
    _first: dict[int, dict[int, Any]] = field(default_factory=dict)

    def note(self, args: list[Any], indices: tuple[int, ...], node: Any,
             slot: Slot | None) -> None:
        """Note that this forward (autograd ``node``) feeds ``args[i]``'s ``.grad`` for ``i``
        in ``indices``, with or without a slot: a forward without one never adds into
        ``.grad`` itself, but the backwards that do (a head whose weight is tied to this
        embedding) must know, or they add their share first and autograd this one after."""
        if slot is not None:  # weakly: a dropped microbatch must not keep a model
            self._params[slot.index] = tuple(weakref.ref(args[i]) for i in indices)
        key = (id(args[indices[0]]), id(args[indices[-1]])) if indices else (0, 0)
        if node is not None:  # by identity: ``.data =`` moves the address, not the id
            self.region.forward_nodes[node()] = key
        elif not self.region.nodes_unknown:
            self.region.nodes_unknown = True
            log.info("%s: a forward's autograd node was not found in its calling frames; its "
                     "backwards leave adding into .grad to autograd", self.name)
        self.region.note_parameters(args, indices, key)

    def remember(self, args: list[Any], static: tuple[int, ...], slot: Slot) -> None:
        """At a forward whose backward is yet to be compiled: its ``static`` inputs, and its
        node under the key its parameter set will most likely have (those that need a
        gradient), so that ``watch`` knows when another forward of theirs is in its pass."""
        self._first[slot.index] = {i: weakref.ref(args[i]) for i in static}
        fed = [i for i in static if getattr(args[i], "requires_grad", False)]
        if fed and slot.node is not None:
            self.region.forward_nodes[slot.node()] = (id(args[fed[0]]), id(args[fed[-1]]))

    def buffers(self, slot: Slot) -> list[torch.Tensor] | None:
        """The ``.grad`` buffers this backward can add into itself, or None when autograd must
        do it: a buffer is missing or of another layout, a hook watches a parameter, or another
        feeder of one runs in this backward pass. A backward that adds watches on ``watch``'s
        schedule whether its parameters' accumulators get any gradient all the same: a feeder
        outside fxslots that starts while ``.grad`` persists (``set_to_none=False``), whose
        step is an ulp off, every later one exact."""
        # the buffers first: after zero_grad(set_to_none=True) it stops at the first parameter,
        # before the region-wide checks below (~10 us a backward, issue 12's host cost)
        refs = self._params.get(slot.index, ())
        grads = _torch.accumulating_grads([ref() for ref in refs], self._checked)
        if not grads or not self.alone_in_backward(refs):
            return None
        if self._feeds_a_shared_parameter(refs) and self._shared_in_this_backward(refs, True):
            return None
        if self._due("_adds"):
            self._rewatch([ref() for ref in refs], None)
        return grads

    def grads_at(self) -> tuple[int, ...]:
        """The addresses of the ``.grad`` buffers ``buffers`` last checked, which are the ones
        it returned when it returns any (its check reads them every call)."""
        return self._checked.ptrs

    def watch(self, slot: Slot, indices: tuple[int, ...], grads: list[Any]) -> None:
        """At a backward that hands autograd ``grads`` (its parameters' gradients, in order)
        because a ``.grad`` is yet to be made (a step's first backward after
        ``zero_grad(set_to_none=True)``, training's first), or because code outside fxslots
        was seen feeding one of them: learn whether it feeds one in this pass, where nothing
        fxslots knows does. Every later backward leaves such a parameter to autograd, until a
        watched pass finds it alone again. About 3-8 us a parameter: each kind's first few
        backwards, then one in ``WATCH_EVERY`` (a feeder that starts or stops later is seen
        within that many steps; ``buffers`` watches the backwards that add themselves)."""
        first = self._first.pop(slot.index, None)
        refs = self._params.get(slot.index, ()) if first is None else tuple(
            first.get(i, _dead) for i in indices)
        params = [ref() for ref in refs]
        # a non-leaf in a parameter's place (functional_call with noised weights) has no .grad
        if not params or any(p is None or not p.is_leaf for p in params):
            return
        kept = all(p.grad is not None for p in params)
        if (kept and not _fed_outside(params)) or not self._due(
                "_rechecks" if kept else "_moments"):
            return
        if not self.alone_in_backward(refs) or self._shared_in_this_backward(refs, False):
            return
        self._rewatch(params, grads)

    def _due(self, counter: str) -> bool:
        """Whether this backward watches: each kind's first ``WATCH_FIRST``, then one in
        ``WATCH_EVERY``."""
        n = getattr(self, counter) + 1
        setattr(self, counter, n)
        return n <= WATCH_FIRST or not n % WATCH_EVERY

    def _rewatch(self, params: list[Any], grads: list[Any] | None) -> None:
        for handle in self._watching:  # fired by now, or their pass ended without them
            handle.remove()
        self._watching = _torch.watch_accumulators(params, grads, state.note_fed_outside)

    def alone_in_backward(self, refs: tuple) -> bool:
        """Whether this backward is the only one of this backward pass to feed its parameters
        ``refs`` (no other forward of theirs runs in it: ``f(f(x))``, a sum of microbatches'
        losses, whether their slots are pending or a saved-tensor hook let them go). Every
        backward of the pass sees the same nodes (one that already ran still counts), so all
        of them decide alike."""
        if self.region.nodes_unknown:
            return False
        me = _torch.current_node()
        key = (id(refs[0]()), id(refs[-1]())) if refs else None
        related = self.region.related.get(key, (key,))  # sets that share a parameter with it
        return not any(params in related and node is not me
                       and _torch.runs_in_this_backward(node)
                       for node, params in list(self.region.forward_nodes.items()))

    def _feeds_a_shared_parameter(self, refs: tuple) -> bool:
        """Whether another region, or code outside fxslots, has fed one of these parameters
        too (cached until a parameter gains or loses a second feeder)."""
        if self._shared[0] != state.accumulators_version:
            entries = [state.accumulators.get(id(r())) for r in refs if r() is not None]
            live = {id(r) for r in state.regions.values()} | {state.OUTSIDE}
            shared = any(e is not None and e[0]() is not None and len(e[1] & live) > 1
                         for e in entries)
            self._shared = (state.accumulators_version, shared)
        return self._shared[1]

    def _shared_in_this_backward(self, refs: tuple, outside: bool) -> bool:
        """Whether another region's forward that fed one of these parameters is part of this
        backward pass, or (``outside``) code outside fxslots was seen feeding one: whether it
        runs in this pass, only its accumulator's inputs tell (``watch``)."""
        params = [p for p in (r() for r in refs) if p is not None]
        feeders: set[int] = set()
        for p in params:
            feeders |= state.accumulators.get(id(p), (None, set()))[1]
        if outside and state.OUTSIDE in feeders:
            return True
        ids = {id(p) for p in params}
        return any(id(region) in feeders and region is not self.region
                   and region.feeds_in_this_backward(ids)
                   for region in list(state.regions.values()))
