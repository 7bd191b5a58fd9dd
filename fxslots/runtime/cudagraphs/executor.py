"""CUDA graphs: one capture per (variant, slot, direction, shape), all on one shared pool.

Why ``torch.cuda.CUDAGraph`` and not CUDA graph trees: the trees assume every live pool
allocation is a tracked output that dies at the next generation; slot lifetimes (a forward's saved
tensors outlive other replays until their backward) and persistent ``.grad`` buffers break that
(docs/design.md has the measured failures). Here the pool holds only what dies within a replay:

- saved tensors live in the slot arena (outside the pool, at a fixed address per slot);
- non-static inputs are staged into the slot (forward) or the region's staging buffer (backward);
- user outputs go to memory the caller owns (an output buffer, or a copy): replays reuse pool bytes;
- parameters' gradients are written by the backward into an output buffer outside the pool
  (``passes/deliver.py``) while the caller drops them before the next backward, else copied.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from ... import _torch, state
from ...fallback import capture_failed
from ...options import Options
from ...passes.collect import mutated_placeholders
from ..layout import geometry_of, make_views, pack, slot_views
from ..ring import Slot
from ..variant import Direction, EagerExecutor, Variant
from .banks import Tangents, forward_buffer, note_capture
from .delivery import Deliveries, warm_up
from .keys import CaptureKey, moved_grads
from .outputs import Captured, OutKind, describe_outputs, own_user_outputs, saved_views
from .pool import CaptureFailed, CudaCapturer
from .room import room_for
from .staging import copy_staged, write_back

log = logging.getLogger(__name__)


class GraphExecutor:
    """Replays captured CUDA graphs for one variant; captures on first use of each key."""

    def __init__(self, variant: Variant, options: Options):
        self.options = options
        self.region = variant.region
        self.capturer = CudaCapturer(variant.device, options)
        self.graphs: dict[CaptureKey, Captured] = {}
        self.shapes: set = set()  # the forward shapes captured (banks.note_capture)
        # (direction, accumulate, a delivering graph's own kernels) run once uncaptured, at
        # which Inductor compile count (run 20: after one, a kernel tuned in a capture)
        self.warm: dict[tuple, int] = {}
        self.uncaptured: set[CaptureKey] = set()
        self._user_outputs = variant.user_outputs  # copied out for the caller after a forward
        placeholders = list(variant.forward_graph.graph.find_nodes(op="placeholder"))
        self._staged = [[p.name for p in placeholders].index(v.holds)
                        for v in variant.plan.staging]
        mutated = mutated_placeholders(variant.forward_graph)
        self._mutated = {i for i, p in enumerate(placeholders) if p in mutated}
        self._tangents: list[int] | None = None
        # False once a graph cannot be captured: every run is a first run, staged as for one
        self.capturing = True
        self.tangents = Tangents(self.region, options.alignment)
        self.deliveries = Deliveries(options.alignment)
        variant.ring.subscribe(self.slot_moved)
        self.region.staging.subscribe(self.staging_moved)

    def slot_moved(self, slot: int) -> None:
        """Its arenas moved: every graph of that slot points at freed memory."""
        self._drop(lambda k: k.slot == slot)

    def set_died(self, params: int) -> None:
        """A parameter set died (``Region.track_set``): nothing can run its graphs again."""
        self._drop(lambda k: k.params == params)
        self.uncaptured = {k for k in self.uncaptured if k.params != params}

    def staging_moved(self) -> None:
        self.tangents.views = {}
        self._drop(lambda k: k.direction is Direction.BACKWARD)

    @staticmethod
    def _drop_everywhere(stale) -> None:
        """Forget the graphs ``stale`` names in every executor: an output buffer's generation
        is unique in the process (``staging._generations``), and the variants of other shapes
        that write the same slot's buffer cached graphs of its old one too."""
        for region in list(state.regions.values()):
            for v in region.live_variants():
                if isinstance(v.executor, GraphExecutor):
                    v.executor._drop(stale)

    def _drop(self, stale) -> None:
        # Rebuilt, not deleted from in place: freeing a graph can run finalizers (a model's
        # last parameter dying frees its region) that drop graphs here too.
        self.graphs, old = {k: v for k, v in self.graphs.items() if not stale(k)}, self.graphs
        del old

    def forward(self, variant: Variant, slot: Slot | None, args: list[Any], layout,
                aliases: tuple[Any, Any]) -> Any:
        if slot is None:  # nothing to save and nothing to stage: no graph needed
            return variant.runner(Direction.FORWARD)(*args)
        into, generation = forward_buffer(variant, slot, self.capturing and (
            Direction.FORWARD, False, False) in self.warm, self._drop_everywhere)
        key = CaptureKey(Direction.FORWARD, slot.index, slot.generation, 0, layout.key,
                         delivers=generation, params=slot.params)
        cap = self.graphs.get(key)
        if cap is not None and self._replay(cap, args, slot, key):
            tokens = (cap.tokens_for(variant.saved_backward_args) and not slot.watched
                      and self.region.tokens_readable())
            slot.saved_outs = cap.saved_outs if tokens else None
            return cap.results(aliases, variant.device, tokens=tokens, delivered=(into, None),
                               collapse=variant.collapse if tokens else None)
        views = slot_views(layout, aliases, variant.device)
        if into is not None:
            views += make_views(into, variant.device, None, variant.deliver_forward.runs)
        stage = tuple(zip(self._staged, make_views(aliases[0], variant.device, layout.staging),
                          strict=True))
        copy_staged(stage, args)
        staged = dict(stage)
        gargs = [staged.get(i, a) for i, a in enumerate(args)]
        out = self._first_runs(variant, slot, key, gargs + views, stage, len(args), aliases,
                               (into, None))
        write_back(args, [(i, gargs[i]) for i in self._staged if i in self._mutated])
        return own_user_outputs(out, self._user_outputs, (slot.arena, slot.host_arena))

    def backward(self, variant: Variant, slot: Slot | None, args: list[Any],
                 grads: list[torch.Tensor] | None) -> Any:
        if slot is None:
            return variant.runner(Direction.BACKWARD)(*args)
        self.region.note_backward()
        tangents = [i for i in self._tangent_args(variant) if isinstance(args[i], torch.Tensor)]
        if any(_torch.is_batched(args[i]) for i in tangents):
            return self._vmapped(variant, slot, args, grads)
        if self.capturing:
            gargs, tangents_in = self.tangents.stage(variant, slot, args, tangents,
                                                     self._drop_everywhere)
        else:  # no graph reads them at a fixed address: they stay where they are
            gargs, tangents_in = list(args), -1
        gargs += grads or []
        outputs = self.region.outputs_for(slot.params)
        target = self._deliver_into(variant, outputs, slot) if grads is None else None
        key = CaptureKey(Direction.BACKWARD, slot.index, slot.generation,
                         self.region.staging.generation,
                         (slot.layout.key, tuple(tuple(args[i].shape) for i in tangents)),
                         grads is not None, -1 if target is None else target.generation,
                         slot.params, 0 if target is None else target.overlay,
                         variant.grads_at() if grads and self.region.grads_in_arena() else (),
                         tangents_in)
        delivered = (None, None) if target is None else (target.buffer, target.arena)
        cap = self.graphs.get(key)
        # Where this region's backwards deliver, the buffer holds their gradients (the .grad
        # of a later accumulating backward, say): outputs left in the pool go to fresh memory.
        out = None if variant.deliver is not None and outputs.delivering else outputs
        if cap is not None and self._replay(cap, gargs, slot, key):
            return cap.results((None, None), variant.device, out, delivered=delivered)
        gargs += [] if target is None else target.views(variant.device)
        if slot.saved_outs is not None:  # tokens in the saved places: this run reads views
            saved_views(variant.saved_backward_args, slot.saved_outs, gargs)
        out = self._first_runs(variant, slot, key, gargs, (), len(gargs), (None, None),
                               delivered, out)
        # run uncaptured, a gradient that is a tangent as staged is in memory the next
        # backward stages into: copied out, as a capture's would be (_describe)
        return own_user_outputs(out, len(out), self._staged_in(key))

    def _deliver_into(self, variant: Variant, outputs, slot: Slot) -> Any:
        """Where this backward delivers its gradients (a ``delivery.Target``), or None: they
        are copied out of the pool."""
        d = variant.deliver
        # create_graph=True: the gradients join a graph that may outlive the next backward
        if d is None or not outputs.delivering or torch.is_grad_enabled():
            return None
        if d.kernel is None and (Direction.BACKWARD, False, False) not in self.warm:
            return None  # ATen: the plain backward warms up (no buffer held during it)
        target = self.deliveries.target(variant, slot, outputs, self._drop_everywhere)
        if not outputs.delivering:
            log.info("%s: the caller kept the gradients of %d backwards past the next one; "
                     "gradients are copied out from now on", variant.name, outputs.held)
        return target

    def _tangent_args(self, variant: Variant) -> list[int]:
        if self._tangents is None:
            self._tangents = _torch.tangent_indices(variant.backward_graph)
        return self._tangents

    def _vmapped(self, variant: Variant, slot: Slot, args: list[Any],
                 grads: list[torch.Tensor] | None) -> Any:
        """A backward under vmap (``autograd.grad(..., is_grads_batched=True)``, a vectorized
        jacobian) runs uncaptured: its batched tangents cannot be staged for a graph."""
        args = list(args)
        if slot.saved_outs is not None:  # tokens in the saved places: this run reads views
            saved_views(variant.saved_backward_args, slot.saved_outs, args)
        return EagerExecutor().backward(variant, slot, args, grads)

    def _replay(self, cap: Captured, args: list[Any], slot: Slot, key: CaptureKey) -> bool:
        """Replay ``cap`` on ``args``; False (and nothing done) if an input moved since capture."""
        if self.options.debug:
            slot.check_held()
        if (moved := cap.moved(args)) is not None:
            self.region.note_recapture((id(self), key), moved)
            return False
        copy_staged(cap.stage, args)
        cap.graph.replay()
        write_back(args, cap.writeback)
        return True

    def _first_runs(self, variant, slot, key, gargs, stage, nargs, aliases,
                    delivered=(None, None), out=None) -> Any:
        """Warm up (once per graph), else capture and replay; or run uncaptured."""
        delivers = key.overlay or key.delivers != -1  # BORROWS: the graph for temporaries too
        gm = variant.runner(key.direction, key.accumulate, delivers)
        if not self.capturing:
            return gm(*gargs)
        # A delivering graph of ATen kernels runs the plain one's: one warm-up serves both.
        warm = (key.direction, key.accumulate, delivers and key.direction is Direction.BACKWARD
                and variant.deliver.kernel is not None)
        last, compiles = self.warm.get(warm), state.counters["inductor_compiles"]
        stale = last is None or (last != compiles and not isinstance(gm, torch.fx.GraphModule))
        if stale or key in self.uncaptured:
            # Lazy initialisation (cuBLAS handles, autotuning, Inductor's first launch, a
            # kernels.Lazily's compile) must not land in a capture: each graph runs uncaptured
            # first, Inductor's again after any compile since; gradients go to compact memory.
            out = warm_up(variant, key, gm, gargs, stale and variant.kept_grads(key))
            self.warm[warm] = state.counters["inductor_compiles"]
            return out
        cap = self._capture(variant, slot, key, variant.runner(
            key.direction, key.accumulate, delivers, captured=True), gargs, stage, nargs)
        if cap is None:
            return gm(*gargs)
        cap.graph.replay()
        return cap.results(aliases, variant.device, out, delivered=delivered)

    def _capture(self, variant, slot, key, gm, gargs, stage, nargs) -> Captured | None:
        try:
            graph, outs = self.capturer.capture(gm, gargs, room_for(self.region.live_variants()))
        except CaptureFailed as failed:
            state.counters["capture_failures"] += 1
            return self._failed(variant, slot, key, failed)
        state.counters["captures"] += 1
        log.info("%s: captured %s graph for slot %d (%d captures in all)", variant.name,
                 key.direction.value, slot.index, state.counters["captures"])
        note_capture(variant.region, variant.name, key, self.shapes)
        cap = self._describe(graph, outs, key, slot, gargs, stage, nargs)
        del outs  # pool outputs die here; their bytes may serve later captures as scratch
        old, moved = moved_grads(self.graphs, key, nargs, len(variant.ring.slots) + 1)
        if old is not None and not state.preparing:  # .grad given new memory; not prepare's
            self._drop(lambda k: k == old)
            self.region.note_recapture((id(self), key._replace(grads_at=())), moved)
        self.graphs[key] = cap
        return cap

    def _describe(self, graph, outs, key, slot, gargs, stage, nargs) -> Captured:
        staged = {i for i, _ in stage}
        # Saved tensors sit in the slot at addresses the key fixes (slot, generation, shape);
        # their arguments may be tokens at replay (outputs.Captured.results), so not checked.
        in_slot = {a.data_ptr() for a in (slot.arena, slot.host_arena) if a is not None}
        buffer = self._buffer(key, slot)  # its views: the buffer's generation is in the key
        if buffer is not None:
            in_slot.add(buffer.tensor.data_ptr())
        static = tuple((i, a.data_ptr()) for i, a in enumerate(gargs[:nargs])
                       if isinstance(a, torch.Tensor) and i not in staged
                       and a.untyped_storage().data_ptr() not in in_slot)
        # Replays stage into the same bytes, but through the arena itself: a view of this
        # forward's alias kept here would hold its slot pending forever.
        fixed = make_views(slot.arena.untyped_storage(), slot.device,
                           [geometry_of(v) for _, v in stage])
        stage = tuple((i, v) for (i, _), v in zip(stage, fixed, strict=True))
        forward = key.direction is Direction.FORWARD
        arenas = {slot.arena.data_ptr(): OutKind.SLOT}
        if slot.host_arena is not None:
            arenas[slot.host_arena.data_ptr()] = OutKind.HOST
        # a gradient that is a tangent as staged is copied out, never handed out in place
        staging = set(arenas) | {t.data_ptr() for t in self._staged_in(key)}
        if not forward:
            arenas = {slot.arena.data_ptr(): OutKind.ARENA_GRADS} if key.overlay else {}
        if buffer is not None:
            arenas[buffer.tensor.data_ptr()] = OutKind.BUFFER
        outs = describe_outputs(outs, gargs, arenas, staging, self._user_outputs if forward else 0)
        return Captured(graph, static, stage, outs,
                        tuple((i, dst) for i, dst in stage if forward and i in self._mutated),
                        own=forward)

    def _buffer(self, key: CaptureKey, slot: Slot) -> Any:
        """The output buffer the graph of ``key`` delivers into (None: none)."""
        if key.delivers == -1:
            return None
        if key.direction is Direction.FORWARD:
            return self.region.outputs_of_slot(slot.index).holding(key.delivers)
        return self.region.outputs_for(key.params, placed=bool(key.overlay))

    def _staged_in(self, key: CaptureKey) -> tuple[torch.Tensor, ...]:
        """The buffer the tangents of a backward of ``key`` were staged in."""
        buffer = (self.region.staging if key.tangents_in == -1 else
                  self.region.outputs_of_slot(key.slot).holding(key.tangents_in))
        return () if buffer is None or buffer.tensor is None else (buffer.tensor,)

    def _failed(self, variant, slot, key, failed: CaptureFailed) -> None:
        capture_failed(failed, f"the {key.direction.value} graph of {variant.name} (slot "
                       f"{slot.index})", not isinstance(variant.runner(key.direction),
                                                        torch.fx.GraphModule),
                       "options={'cudagraphs': False} for the whole model", self.options,
                       self.uncaptured, key)
