"""A compiled region: what every variant (shape, recompile) of one Dynamo frame shares."""

from __future__ import annotations

import logging
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import _torch, state
from ..errors import OptionsError
from ..options import Options
from .cudagraphs.staging import OutputBanks, OutputBuffer, StagingBuffer, release
from .ring import SlotRing

log = logging.getLogger(__name__)
RECAPTURES_NOTED = 3  # recaptures of one graph before the warning: past warm-up's


@dataclass(eq=False)
class Region:
    """The slot ring of one region and the buffers its backward replays share (staged inputs,
    handed-out gradients). Variants hold it; ``fxslots.state.regions`` only points at it."""

    ring: SlotRing
    staging: StagingBuffer = field(default_factory=StagingBuffer)
    # Per parameter set (ring.Slot.params): one compiled graph can serve several modules (a
    # pipeline rank's chunks), whose gradients each backward delivers into a buffer of their own.
    outputs: dict[int, OutputBuffer] = field(default_factory=dict)
    # ... and where backwards that put the others in the arena deliver the rest (not the
    # same: a loop may need both, prepare captures both, and this one is smaller).
    placed_outputs: dict[int, OutputBuffer] = field(default_factory=dict)
    # Per parameter set whose backwards placed gradients outside prepare (release_outputs):
    # whether one that placed none needed the full buffer after that.
    _placing: dict[int, bool] = field(default_factory=dict)
    # Per slot index: where its forwards write the large outputs they hand out
    # (``Variant.deliver_forward``); shared by an arena group's regions, as the ring is.
    forward_outputs: dict[int, OutputBanks] = field(default_factory=dict)
    variants: list = field(default_factory=list)  # weak references to its Variants
    noted_capture: bool = False  # logged that a capture happened outside fxslots.prepare
    noted_recapture: bool = False  # warned that moved inputs keep making a graph capture again
    # Seen at a forward: gradients a backward handed out were still held (a loop that
    # accumulates them, a pipeline schedule), or had been dropped (zero_grad before it).
    grads_kept: bool = False
    # The autograd node of each forward that may add into .grad, weakly, with its parameter set
    # (its first and last parameter's ids): which of them a backward pass runs (runtime.feeds).
    forward_nodes: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)
    nodes_unknown: bool = False  # a forward's node was not found: every backward leaves it
    # Each parameter set's key (its first and last parameter's ids) -> the ids of all its
    # parameters, and -> the keys of the sets it shares a parameter with, itself included
    # (note_parameters): backwards of related sets in one pass leave .grad to autograd.
    param_sets: dict[tuple[int, int], frozenset] = field(default_factory=dict)
    related: dict[tuple[int, int], set] = field(default_factory=dict)
    grads_dropped: bool = False
    ran_backward: bool = False  # fxslots ran a backward of it outside prepare (tokens_readable)
    _grads: Any = None  # weak reference to the storage of a gradient watch_grads saw
    _recaptures: Counter = field(default_factory=Counter)  # by capture key
    _anchors: set[int] = field(default_factory=set)  # ids of the live anchors
    _sets: set = field(default_factory=set)  # parameter sets (Slot.params) track_set watches

    @classmethod
    def new(cls, name: str, options: Options) -> "Region":
        return cls(SlotRing(name, options))

    def outputs_for(self, params: int, placed: bool = False) -> OutputBuffer:
        return _made(self.placed_outputs if placed else self.outputs, params, OutputBuffer)

    def release_outputs(self, params: int, placed: bool, drop: Any) -> None:
        """Before a backward of ``params`` delivers (``placed``: with gradients in the arena),
        free the output buffer the loop no longer needs, forgetting its graphs; both were
        filled once (Inductor's twin warms up delivering into the full one, ``prepare``
        captures both). The full one at a placed backward (kept, it held llama-large's 0.92
        GiB: H200 run 42a), unless one that placed none needed it since: freed each time, it
        would grow and capture in turn, across variants too. The other once the loop is seen
        keeping gradients, for good. Nothing inside ``prepare``."""
        if state.preparing:
            return
        if not placed:
            if params in self._placing:
                self._placing[params] = True
            if self.grads_kept:
                release(self.outputs_for(params, placed=True), drop)
        elif not self._placing.setdefault(params, False):
            release(self.outputs_for(params), drop)

    def track_set(self, params: int, anchors: tuple[Any, ...]) -> None:
        """At a forward of the parameter set ``params`` (``Slot.params``): forget what it
        keeps (its graphs, output buffers) when either of its ``anchors`` dies. Models of one
        class share this region, and a sibling that lives on keeps it (a sweep, an evaluation
        copy per epoch: 203 graphs after 40 short-lived models)."""
        if params in self._sets:
            return
        self._sets.add(params)
        _on_death(self, anchors, "_forget_set", params)

    def _forget_set(self, params: int) -> None:
        if params not in self._sets:  # its other anchor died first
            return
        self._sets.discard(params)
        for v in self.live_variants():
            v.executor.set_died(params)
        self._recaptures = Counter({k: n for k, n in self._recaptures.items()
                                    if k[1].params != params})  # (executor id, CaptureKey)
        for buffers in (self.outputs, self.placed_outputs):
            if (buffer := buffers.pop(params, None)) is not None:
                buffer.free()
        self._placing.pop(params, None)

    def outputs_of_slot(self, index: int) -> OutputBanks:
        return _made(self.forward_outputs, index, OutputBanks)

    def watch_grads(self, grad: Any) -> None:
        """After a backward, until the loop is seen to keep gradients: one it handed out."""
        if (not self.grads_kept and isinstance(grad, torch.Tensor)
                and not state.preparing  # fxslots.prepare drops them itself
                and not _torch.is_batched(grad)):  # under vmap: nothing the loop keeps
            self._grads = _torch.StorageWeakRef(grad.untyped_storage())

    def note_forward(self) -> None:
        """Before a forward takes a slot: whether the gradient last watched is still held
        tells what the training loop does with gradients (``grads_in_arena``)."""
        if self._grads is not None and not state.preparing:
            held = not self._grads.expired()
            self.grads_kept |= held
            self.grads_dropped |= not held
            self._grads = None

    def note_parameters(self, args: list[Any], indices: tuple[int, ...],
                        key: tuple[int, int]) -> None:
        """At a forward that may add into the ``.grad`` of ``args[i]`` for ``i`` in
        ``indices``, a set known by ``key`` (its first and last parameter's ids; one compiled
        graph serves every module of a class, a pipeline rank's chunks, a new model after an
        old one died): the first time, record it in ``state.accumulators`` and relate it to
        every set of this region it shares a parameter with (a norm the blocks share, a tied
        bias). Related sets' backwards in one backward pass leave adding into .grad to
        autograd (``Feeds.alone_in_backward``), which sums all of a pass's shares first."""
        if key in self.param_sets and self._noted(args[indices[0]]):
            return
        ids = frozenset(id(args[i]) for i in indices)
        if key not in self.param_sets:
            _on_death(self, (args[indices[0]], args[indices[-1]]), "_forget_params", key)
        mine = self.related.setdefault(key, {key})
        for other, their_ids in self.param_sets.items():
            if ids & their_ids:  # an id a dead parameter had may relate sets for nothing
                mine.add(other)
                self.related[other].add(key)
        self.param_sets[key] = ids
        for i in indices:
            state.note_feeder(args[i], id(self))

    def _forget_params(self, key: tuple[int, int]) -> None:
        """A parameter set ``note_parameters`` recorded died: a new one may take its ids."""
        self.param_sets.pop(key, None)
        for other in self.related.pop(key, ()):
            self.related.get(other, set()).discard(key)

    def _noted(self, p: Any) -> bool:
        """Whether ``state.accumulators`` holds this region for ``p`` itself: a key's ids may
        be a dead set's, reused by new parameters (a new model after an old one died)."""
        ref, regions = state.accumulators.get(id(p), (None, ()))
        return ref is not None and ref() is p and id(self) in regions

    def feeds_in_this_backward(self, ids: set[int]) -> bool:
        """Whether a forward of this region that fed one of the parameters ``ids`` is part of
        the backward pass running now (it may have run already): it adds its share too."""
        keys = {key for key, theirs in self.param_sets.items() if theirs & ids}
        if not keys or self.nodes_unknown:
            return bool(keys)
        return any(params in keys and _torch.runs_in_this_backward(node)
                   for node, params in list(self.forward_nodes.items()))

    @property
    def sets_share(self) -> bool:
        """Whether two of its parameter sets share a parameter."""
        return any(len(keys) > 1 for keys in self.related.values())

    def note_backward(self) -> None:
        if not state.preparing:
            self.ran_backward = True

    def tokens_readable(self) -> bool:
        """Whether a replayed forward may hand autograd one token per arena: only a backward
        fxslots runs can read them. Compiled autograd on around a backward but not its forward
        runs its copy of AOTAutograd's backward graph instead, which takes saved tensors where
        the tokens stand and fails. So tokens wait for the loop to run a backward through
        fxslots (``prepare``'s tell nothing): a loop that turns compiled autograd on for its
        backwards alone never gets that far."""
        return self.ran_backward

    def grads_in_arena(self) -> bool:
        """Whether backwards may write gradients into their slot's arena (``fxslots.overlay``):
        only once the loop has dropped them before a forward, and never kept them past one
        (the next forward into that slot would need a new arena: ``ring.SlotRing._evict``).
        Watched at every backward: a loop that starts keeping them stops it before a forward
        has to evict, unless that very forward finds no other slot."""
        return self.grads_dropped and not self.grads_kept and self.ring.evictions == 0

    def note_recapture(self, key: Any, argument: int) -> None:
        """The graph captured under ``key`` found an input it reads in place (a parameter, a
        buffer, the .grad an accumulating backward adds into) at another address than at
        capture, so it captures again: harmless while training warms up (the first .grad
        buffers), a capture's cost per step if it repeats. Counted
        (``fxslots.counters["recaptures"]``); the third time one graph does it in training
        (not inside ``fxslots.prepare``), a warning."""
        state.counters["recaptures"] += 1
        # fxslots.prepare drops and regrows .grad between its passes: moves the loop never made
        if not state.preparing:
            self._recaptures[key] += 1
        if self.noted_recapture or self._recaptures[key] < RECAPTURES_NOTED:
            log.info("%s: argument %d moved since capture; capturing again", self.ring.name,
                     argument)
            return
        self.noted_recapture = True
        log.warning("fxslots: %s: a captured graph was captured again %d times because an "
                    "argument it reads in place (argument %d: a parameter, a buffer or a .grad "
                    "an accumulating backward adds into) keeps moving, which costs a capture "
                    "each time; keep that tensor's storage (update it in place), or set "
                    "options={'cudagraphs': False}", self.ring.name, self._recaptures[key],
                    argument)

    def live_variants(self) -> list:
        return [v for v in (r() for r in self.variants) if v is not None]

    def anchor(self, obj: Any) -> None:
        """Free the memory once ``obj`` (a parameter of the compiled model) and every other
        anchor have died: Dynamo keeps compiled code (and so this region) after the model is
        gone, but nothing can run on the slots of a model that no longer exists."""
        if id(obj) not in self._anchors:
            self._anchors.add(id(obj))
            _on_death(self, (obj,), "_anchor_died", id(obj))

    def _anchor_died(self, key: int) -> None:
        if key in self._anchors:
            self._anchors.discard(key)
            if not self._anchors:
                self.free()

    def free(self) -> None:
        """Give back every byte no microbatch holds, and the graphs that point at them."""
        self.ring.free()
        self.staging.free()
        for buffer in (*self.outputs.values(), *self.placed_outputs.values(),
                       *self.forward_outputs.values()):
            buffer.free()


def _made(values: dict, key: Any, make: Any) -> Any:
    value = values.get(key)
    if value is None:
        value = values[key] = make()
    return value


def _on_death(region: Region, anchors: tuple[Any, ...], method: str, key: Any) -> None:
    """Call ``region.<method>(key)`` when the first of ``anchors`` dies (a parameter the
    modules share may be one), holding none of them nor the region."""
    me = weakref.ref(region)

    def died() -> None:
        if (r := me()) is not None:
            getattr(r, method)(key)
    for a in {id(a): a for a in anchors}.values():
        weakref.finalize(a, died).atexit = False  # not at exit: nothing runs after it


def region_for(opts: Options, raw_options: Any) -> Region:
    """Variants of one region (recompiles of one Dynamo frame, same torch.compile options
    object) share one region, so their arenas are sized by the largest, not summed."""
    frame = _torch.current_frame_id()
    key = (frame, id(raw_options), opts)
    region = state.regions.get(key)
    if region is None:
        name = f"region {frame if frame is not None else len(state.regions)}"
        region = state.regions[key] = _joined(opts) or Region.new(name, opts)
    return region


def _joined(opts: Options) -> Region | None:
    """A region of ``opts.arena_group``: the group's ring and staging buffer, shared with the
    regions already in it (stages of one pipeline rank whose frames are never all live)."""
    if opts.arena_group is None:
        return None
    peer = next((r for r in state.regions.values()
                 if r.ring.options.arena_group == opts.arena_group), None)
    if peer is None:
        return Region.new(f"arena group {opts.arena_group!r}", opts)
    theirs = peer.ring.options
    for name in ("slots", "max_arena_bytes", "debug"):
        if getattr(theirs, name) != getattr(opts, name):
            raise OptionsError(
                f"fxslots: regions of arena_group {opts.arena_group!r} share one slot ring, "
                f"so they need one option {name!r}: this one has {getattr(opts, name)!r}, "
                f"the group {getattr(theirs, name)!r}; give them the same value (one arena "
                f"group per pipeline rank: fxslots.pipelining.plan(schedule).options(stage))")
    # One set of anchors: the group's memory is freed when the last of its models dies.
    return Region(peer.ring, peer.staging, forward_outputs=peer.forward_outputs,
                  _anchors=peer._anchors)
