"""The slot ring: who owns which slot's memory. Nothing here knows about graphs.

A forward takes a free slot and hands its graph views of a fresh alias of the slot's arena. A
slot is pending while any view of that alias lives (autograd holds them until backward, longer
with retain_graph=True); its backward, found by the address of its saved tensors, gives it back.
Views that outlive their autograd graph keep the old arena to themselves (``SlotRing._disown``).
Whoever keeps pointers into an arena (captured CUDA graphs) subscribes to hear when it moves.
"""

from __future__ import annotations

import gc
import itertools
import logging
import threading
import weakref
from typing import Any, Callable

import torch

from .. import _torch, state
from ..errors import ArenaLimitError, FxslotsError, SlotsExhaustedError
from ..options import Options
from .alloc import best_fit, lasting, poison
from .slot import Slot

log = logging.getLogger(__name__)

ArenaMoved = Callable[[int], None]
"""Told the index of a slot whose arenas moved or were freed: pointers into them are dead."""

__all__ = ["ArenaMoved", "Slot", "SlotRing"]


class SlotRing:
    """K slots shared by every variant of one compiled region (one Dynamo frame). ``acquire``
    and ``release`` hold a lock: threads sharing one compiled model never take the same slot."""

    def __init__(self, name: str, options: Options):
        self.name = name
        self.options = options
        self.slots: list[Slot] = []
        self.grow_events = 0
        self.evictions = 0  # arenas moved because gradients in them outlived the next forward
        self.orphans = 0  # arenas left to views that outlived their autograd graph (_disown)
        self.retained = 0  # slots added beside ones a retained graph holds (_add_retained)
        self._microbatches = itertools.count()
        self._lock = threading.RLock()
        self._listeners: list[weakref.WeakMethod] = []

    def subscribe(self, listener: ArenaMoved) -> None:
        """Call ``listener(slot_index)`` whenever that slot's arenas move; held weakly."""
        self._listeners.append(weakref.WeakMethod(listener))

    def acquire(self, nbytes: int, device: torch.device, variant: str,
                host_nbytes: int = 0, params: int = 0, node: Any = None
                ) -> tuple[Slot, Any, Any]:
        """A free slot whose arenas hold ``nbytes`` (device) and ``host_nbytes`` (host), and a
        fresh alias storage of each (None for an unused host arena), for a forward of the
        parameter set ``params`` (``Slot.params``) whose autograd node is ``node``.

        Raises before anything is written when every slot is pending or the arena limit is hit.
        """
        self._check_limit(nbytes, variant)
        with self._lock:
            if not self.slots:
                self.slots = [Slot(i, device) for i in range(self.options.slots)]
            if (slot := self.slots[0]).device != device:  # before a slot is taken or added
                raise FxslotsError(
                    f"fxslots: {self.name} ran on {device} after {slot.device}; one compiled "
                    f"model keeps its slots on one device (compile one model per device)")
            evictions = self.evictions
            slot = self._free_slot(variant, nbytes, host_nbytes, params, device)
            slot.lent, slot.lent_spans = None, ()  # not lent out (or evicted): nothing to spare
            state.release_unviewed()
            if slot.nbytes < nbytes:
                self._grow(slot, nbytes, variant, evicted=self.evictions != evictions)
            if slot.host_nbytes < host_nbytes:
                self._grow(slot, host_nbytes, variant, host=True)
            alias = _torch.storage_alias(slot.arena.data_ptr(), device, nbytes)
            host_alias = None if not host_nbytes else _torch.storage_alias(
                slot.host_arena.data_ptr(), torch.device("cpu"), host_nbytes)
            slot.owner = _torch.StorageWeakRef(alias)
            slot.host_owner = None if host_alias is None else _torch.StorageWeakRef(host_alias)
            slot.variant, slot.params = variant, params
            # under the lock: another thread's forward must never judge this slot orphaned by
            # the node of the forward that held it before
            slot.node, slot.retained = node, False
            slot.microbatch = next(self._microbatches)
            return slot, alias, host_alias

    def _check_limit(self, nbytes: int, variant: str) -> None:
        limit = self.options.max_arena_bytes
        if limit is not None and nbytes > limit:
            raise ArenaLimitError(
                f"fxslots: variant {variant} of {self.name} needs {nbytes} arena bytes per slot, "
                f"more than max_arena_bytes={limit}; raise the option 'max_arena_bytes' or "
                f"bound this input's shape")

    def _free_slot(self, variant: str, nbytes: int, host_nbytes: int, params: int,
                   device: torch.device) -> Slot:
        for s in self.slots:  # a pack hook kept saved views past their backward: theirs now
            if s.kept is not None and not s.pending():
                if s.kept_viewed():
                    self._disown(s, s.kept, "a saved-tensor hook kept them after the backward")
                s.kept = None
        free = [s for s in self.slots if not s.pending() and not s.lent_out()]
        if not free:
            # A dropped autograd graph can sit in a reference cycle (AOTAutograd's double
            # backward keeps one) until the collector runs: collect once before refusing.
            gc.collect()
            free = [s for s in self.slots if not s.pending() and not s.lent_out()]
        if not free and (orphans := [s for s in self.slots if s.orphaned()]):
            s = orphans[0]
            return self._disown(s, (s.owner, s.host_owner), "compiled autograd keeps the "
                                "inputs of each backward it traces, a copy of fxslots'")
        if not free and (lent := [s for s in self.slots if not s.pending()]):
            self._evict(lent[0])
            return lent[0]
        if not free and (added := self._add(params, device) or self._add_retained(device)):
            return added
        if not free:
            raise self._exhausted(variant, params)
        return free[0] if len(free) == 1 else best_fit(free, nbytes, host_nbytes)

    def _exhausted(self, variant: str, params: int) -> SlotsExhaustedError:
        held = ", ".join(f"slot {s.index}: forward #{s.microbatch} ({s.variant})"
                         for s in self.slots)
        sets = {s.params for s in self.slots if s.pending()}
        mine = sum(s.params == params for s in self.slots if s.pending())
        return SlotsExhaustedError(
            f"fxslots: a forward of {self.name} ({variant}) needs a slot, but all "
            f"{len(self.slots)} are pending a backward ({held}). "
            + (f"They hold forwards of {len(sets)} modules that share this compiled graph (blocks "
               f"compiled one by one), each with 'slots' of its own; this module has {mine} "
               f"in flight. " if len(sets) > 1 and params else "")
            + f"Run a backward first, or raise the option 'slots' (now {self.options.slots}) to "
            f"the number of microbatches your schedule keeps in flight. A forward holds its "
            f"slot while anything of its autograd graph lives: an output kept without a "
            f"backward (an evaluation step outside torch.no_grad()), a result of "
            f"create_graph=True, a backward with retain_graph=True while the loss lives"
            + ("" if params else ". A graph without parameters counts every module that runs "
               "it as one (a parameter-less module compiled on its own in each block): compile "
               "the block that holds it instead"))

    def _add(self, params: int, device: torch.device) -> Slot | None:
        """A new slot where the pending ones belong to other parameter sets, fewer than
        ``slots`` to this one: a graph compiled once serves every module of its class (Dynamo
        reuses it: ``torch.compile`` per transformer block), and each module's forwards count
        against ``slots`` as its own microbatches. Not in an arena group: there ``slots`` is
        the plan's count for every chunk of a pipeline rank together."""
        if (self.options.arena_group is not None or sum(
                s.params == params for s in self.slots if s.pending()) >= self.options.slots):
            return None
        self.slots.append(Slot(len(self.slots), device))
        sets = len({s.params for s in self.slots if s.pending()} | {params})
        log.info("%s: forwards of %d parameter sets (modules sharing one compiled graph) are "
                 "in flight; slots=%d holds for each, so the ring grows to %d slots", self.name,
                 sets, self.options.slots, len(self.slots))
        return self.slots[-1]

    def _add_retained(self, device: torch.device) -> Slot | None:
        """A new slot where a pending one is held only by a graph its backward kept
        (``backward(retain_graph=True)``, the loss still referenced: a loop that rebinds
        ``loss`` after the next forward), as eager would hold that memory. Not in an arena
        group, whose slots the pipeline plan counts."""
        if self.options.arena_group is not None or not any(
                s.retained and s.pending() for s in self.slots):
            return None
        self.slots.append(Slot(len(self.slots), device))
        self.retained += 1
        (log.info if self.retained > 1 else log.warning)(
            "fxslots: %s: every slot is pending, and a backward that ran with retain_graph=True "
            "holds one while its graph (the loss) is referenced; the ring grows to %d slots. "
            "Drop the loss before the next forward (del loss), or the retain_graph=True its "
            "backward does not need", self.name, len(self.slots))
        return self.slots[-1]

    def _evict(self, slot: Slot) -> None:
        """Gradients in ``slot``'s arena outlived the next forward (a loop that accumulates
        them, say): the arena stays theirs (``Slot.lend``), and the slot gets a new one
        (``acquire`` allocates it) and its graphs go stale."""
        slot.arena, slot.lent, slot.lent_spans = None, None, ()
        self.evictions += 1
        self._moved(slot)
        log.info("%s: gradients in slot %d's arena are still in use at the next forward; the "
                 "slot takes a new arena, and this region's gradients get a buffer of their "
                 "own from now on", self.name, slot.index)

    def _disown(self, slot: Slot, owners: tuple[Any, Any], why: str) -> Slot:
        """Leave ``slot``'s arenas to the views of them (of the alias storages ``owners``)
        that outlived its microbatch's autograd graph (``why``): nothing writes them again,
        and the slot takes new ones."""
        (log.info if self.orphans else log.warning)(
            "fxslots: %s: the saved tensors of microbatch %s (%s) outlived its autograd graph, "
            "held outside autograd (%s). They keep slot %d's old arenas (%d bytes); the slot "
            "takes new ones", self.name, slot.microbatch, slot.variant, why, slot.index,
            slot.nbytes + slot.host_nbytes)
        for arena, owner in zip((slot.arena, slot.host_arena), owners, strict=True):
            if arena is not None and owner is not None:
                state.keep_while_viewed(arena, owner)  # the views' alias owns no bytes
        slot.arena = slot.host_arena = slot.lent = None
        self.orphans += 1
        self._moved(slot)
        return slot

    def _grow(self, slot: Slot, nbytes: int, variant: str, host: bool = False,
              evicted: bool = False) -> None:
        old = slot.host_nbytes if host else slot.nbytes
        try:
            if host:  # pinned, so copies to and from it can run asynchronously and be captured
                slot.host_arena = None
                slot.host_arena = torch.empty(nbytes, dtype=torch.uint8, device="cpu",
                                              pin_memory=slot.device.type == "cuda")
            else:
                slot.arena = None  # free the old arena first: it holds nothing live
                slot.arena = lasting(nbytes, slot.device)
        except torch.OutOfMemoryError as e:
            if evicted:  # the old arena still holds the gradients the loop kept
                raise ArenaLimitError(
                    f"fxslots: slot {slot.index} of {self.name} needs a new {nbytes}-byte arena "
                    f"for {variant}, because gradients the training loop kept are in its old "
                    f"one, and that ran out of memory ({e}). Set options={{'grads_in_arena': "
                    f"False}} (gradients then never occupy an arena), or drop .grad before the "
                    f"next forward (zero_grad(set_to_none=True))") from e
            raise ArenaLimitError(
                f"fxslots: growing slot {slot.index} of {self.name} to {nbytes} bytes for "
                f"{variant} ran out of memory ({e}). Earlier variants still run; lower the "
                f"batch or sequence size, or set 'max_arena_bytes' to refuse such variants "
                f"up front") from e
        self.grow_events += 1
        self._moved(slot)
        log.info("%s: slot %d %sarena grows %d -> %d bytes for %s", self.name, slot.index,
                 "host " if host else "", old, nbytes, variant)

    def _moved(self, slot: Slot) -> None:
        slot.generation += 1
        live = [w for w in self._listeners if w() is not None]
        self._listeners = live
        for w in live:
            w()(slot.index)

    def find(self, saved: torch.Tensor) -> Slot | None:
        """The slot whose current forward produced ``saved``; None where ``saved`` lies in no
        slot's arena: a saved-tensor hook handed autograd a copy of its own (a pack hook that
        clones, ``save_on_cpu`` on CUDA), so the backward reads that copy, not a slot (whose
        forward let it go when its views died)."""
        cdata = _torch.storage_cdata(saved)
        with self._lock:
            for s in self.slots:
                if s.holds(cdata):
                    # AOTAutograd let the node's saved tensors go before this backward: from
                    # here the slot is read, not orphaned (Slot.orphaned), by any thread
                    s.node = None
                    return s
        if not any(s.contains(saved) for s in self.slots):
            return None
        raise FxslotsError(
            f"fxslots: a backward of {self.name} got saved tensors from no pending slot; their "
            f"slot was reused, which should be impossible. Please report this with FXSLOTS_DEBUG=1")

    def release(self, slot: Slot, saved: torch.Tensor | None = None) -> None:
        """Give ``slot`` back; ``saved``: a saved tensor of the backward giving it back, which
        gives back nothing where the slot went to another microbatch meanwhile (``_disown``)."""
        with self._lock:
            if saved is not None and not slot.owns(saved):
                return
            if self.options.debug and not slot.watched:  # a hook may keep views: they stay
                poison(slot)
            slot.kept = (slot.owner, slot.host_owner) if slot.watched else None
            slot.owner = slot.host_owner = None

    def pending(self) -> int:
        return sum(s.pending() for s in self.slots)

    def free(self) -> None:
        """Give back the arenas of every slot no microbatch holds (a pending slot keeps its
        bytes until its backward); listeners drop whatever pointed into them."""
        with self._lock:
            for s in self.slots:
                if not s.pending() and (s.arena is not None or s.host_arena is not None):
                    s.arena = s.host_arena = None  # lent bytes stay alive (state.viewed)
                    s.layout, s.lent, s.lent_spans = None, None, ()
                    self._moved(s)

