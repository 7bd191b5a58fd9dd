"""One compiled forward/backward pair (a variant) and the executors that run its graphs.

Data flows one way: a variant takes a slot from its ring, evaluates its layout there, and hands
both to its executor, which runs (or replays) the graph. Executors never reach back.
"""

from __future__ import annotations

import enum
import logging
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import torch

from .. import _torch, policies, state
from ..schemas import ArenaPlan
from .layout import SymbolBinder, ViewLayout, layout_of, slot_views
from .region import Region
from .ring import Slot, SlotRing

log = logging.getLogger(__name__)


class Direction(str, enum.Enum):
    FORWARD = "forward"
    BACKWARD = "backward"


# Which delivering backward a captured graph runs (cudagraphs CaptureKey.overlay): gradients in
# the slot's arena; and its large temporaries there too (Overlay.graph).
IN_ARENA, BORROWS = 1, 2


class Executor(Protocol):
    """Runs a variant's graphs: eagerly, or as captured CUDA graphs."""

    def forward(self, variant: "Variant", slot: Slot | None, args: list[Any],
                layout: ViewLayout | None, aliases: tuple[Any, Any]) -> Any: ...

    def backward(self, variant: "Variant", slot: Slot | None, args: list[Any],
                 grads: list[torch.Tensor] | None) -> Any:
        """``grads``: the ``.grad`` buffers to add into (``variant.accumulate``'s graph), or
        None to return every gradient (the plain backward graph, or ``variant.deliver``'s)."""


@dataclass(frozen=True)
class Accumulate:
    """How a variant adds parameter gradients into their ``.grad`` buffers in its backward."""

    indices: tuple[int, ...]  # forward arguments (= backward outputs) that are parameters
    graph: Callable[..., Any]  # the backward graph that takes their buffers, last
    kernel: Callable[..., Any] | None = None  # Inductor's code for it (kernels="inductor")
    # What a CUDA graph captures (ATen kernels): the same adds in groups as gradients are
    # computed, not all at the end (a replay cannot stop part-way: passes/accumulate.py).
    captured: Callable[..., Any] | None = None


@dataclass(frozen=True)
class Deliver:
    """How a variant's captured backward writes the gradients it hands out into the region's
    output buffer itself (``passes/deliver.py``), instead of their being copied there after
    each replay."""

    outputs: tuple[int, ...]  # the backward outputs delivered
    geometry: tuple[tuple, ...]  # where each lands in the buffer (runtime.layout.Geometry)
    nbytes: int
    graph: Callable[..., Any]  # the backward graph that takes their buffer views, last
    kernel: Callable[..., Any] | None = None  # Inductor's code for it (kernels="inductor")
    in_place: int = 0  # how many are computed into the buffer by their producer (no copy)
    runs: tuple = ()  # runtime.layout.view_runs(geometry), grouped once
    overlay: Any = None  # fxslots.overlay.Overlay: its gradients may go into the slot's arena
    warm_up: bool = False  # its warm-up computes the kept gradients into one buffer (lower peak)


@dataclass
class Variant:
    """One compiled forward/backward pair of a region, and how it uses the region's slots."""

    name: str
    region: Region
    device: torch.device
    plan: ArenaPlan
    binder: SymbolBinder
    forward_graph: Callable[..., Any]
    executor: Executor | None = None  # set right after: an executor is made for its variant
    # The first and the last parameter among the forward's arguments: a parameter set's name
    # (Slot.params). A parameter two modules share is seldom both (a shared norm used first).
    # Chosen among ``candidates`` (static inputs) at the first forward (policies.anchors_of).
    candidates: tuple[int, ...] = ()
    anchors: tuple[int, ...] | None = None
    # The forward's first outputs, which the caller receives (user outputs, mutated inputs'
    # new values): with CUDA graphs they may be written in the slot, and are copied out.
    user_outputs: int = 0
    backward_graph: Callable[..., Any] | None = None
    saved_arg_index: int | None = None  # a backward argument that is a slot view
    # Forward output index -> backward argument index, for every saved tensor in the slot.
    saved_backward_args: dict[int, int] | None = None
    collapse: Any = None  # runtime.collapse.Collapse: one token per arena for AOTAutograd
    accumulate: Accumulate | None = None
    deliver: Deliver | None = None
    # The forward that writes its large user outputs into its slot's output buffer itself
    # (ATen kernels; grads.deliver_forward): no pool bytes for them, no copy after the replay.
    deliver_forward: Deliver | None = None
    layouts: dict[tuple, ViewLayout] = field(default_factory=dict)
    _params: dict[int, tuple] = field(default_factory=dict)  # per slot: its forward's params
    _shared: tuple[int, bool] = (-1, False)  # (state.accumulators_shared, a parameter is shared)
    _checked: Any = field(default_factory=_torch.CheckedGrads)  # the .grad buffers last checked
    # kernels="inductor": Inductor's compiled graphs; the GraphModules above stay for analysis,
    # printing, and as what runs when Inductor could not compile one.
    forward_kernel: Callable[..., Any] | None = None
    backward_kernel: Callable[..., Any] | None = None

    def runner(self, direction: Direction, accumulate: bool = False,
               deliver: bool | int = False, captured: bool = False) -> Callable[..., Any]:
        """What runs a graph (``captured``: into a CUDA graph): Inductor's code for it when
        there is, else its GraphModule; ``deliver`` BORROWS: the delivering backward that
        computes temporaries into arena views too; a forward's ``deliver``: the one that writes
        its outputs into its slot's output buffer."""
        if direction is Direction.FORWARD:
            return (self.deliver_forward.graph if deliver
                    else self.forward_kernel or self.forward_graph)
        if accumulate:
            return ((captured and self.accumulate.captured) or _ran(self.accumulate.kernel)
                    or self.accumulate.graph)
        if deliver == BORROWS:
            return self.deliver.overlay.graph
        if deliver:
            return self.deliver.kernel or self.deliver.graph
        return _ran(self.backward_kernel) or self.backward_graph

    def kept_grads(self, key: Any) -> tuple[int, ...] | None:
        """The outputs of the run of a ``CaptureKey`` that are parameters' gradients autograd
        may keep as ``.grad`` (a backward not adding into existing buffers itself), or None."""
        if (key.direction is Direction.BACKWARD and not key.accumulate
                and self.accumulate is not None):
            return self.accumulate.indices
        return None

    @property
    def ring(self) -> SlotRing:
        return self.region.ring

    def layout(self, args: list[Any]) -> ViewLayout:
        key = self.binder.key(args) if self.binder.read else ()
        lay = self.layouts.get(key)
        if lay is None:
            lay = self.layouts[key] = layout_of(self.plan, self.binder.bind(args))
        return lay

    def forward(self, args: list[Any]) -> Any:
        if self.anchors is None:
            self.anchors = policies.anchors_of(args, self.candidates)
        if self.anchors:
            self.region.anchor(args[self.anchors[0]])
        if not self.plan.views and not self.plan.staging:  # nothing to save, nothing to stage
            if self.accumulate is not None:  # no slot, but its backward feeds .grad too
                self._note_feeder(args, _torch.calling_node())
            return self.executor.forward(self, None, args, None, (None, None))
        lay = self.layout(args)
        self.region.note_forward()
        # By identity, not address: a parameter given new memory (``.data =``, FSDP's regathered
        # shards) is the same module's, and its graphs are found moved and captured again
        params = hash((id(args[self.anchors[0]]), id(args[self.anchors[1]]))) if self.anchors else 0
        slot, alias, host_alias = self.ring.acquire(lay.nbytes, self.device, self.name,
                                                    lay.host_nbytes, params, _torch.calling_node())
        slot.layout, slot.saved_outs = lay, None
        slot.watched = _torch.saved_tensors_watched()
        if self.accumulate is not None:  # weakly: a dropped microbatch must not keep a model
            self._params[slot.index] = tuple(weakref.ref(args[i]) for i in self.accumulate.indices)
            self._note_feeder(args, slot.node)
        try:
            out = self.executor.forward(self, slot, args, lay, (alias, host_alias))
            del alias, host_alias
        except BaseException:
            self.ring.release(slot)
            raise
        return out

    def _note_feeder(self, args: list[Any], node: Any) -> None:
        """Note that this forward (autograd ``node``) feeds its parameters' ``.grad``, with or
        without a slot: a forward without one never adds into ``.grad`` itself, but the
        backwards that do (a head whose weight is tied to this embedding) must know, or they
        add their share first and autograd this one after: two roundings where eager sums
        and adds once."""
        indices = self.accumulate.indices
        key = (id(args[indices[0]]), id(args[indices[-1]])) if indices else (0, 0)
        self._note_node(node, key)
        self.region.note_parameters(args, indices, key)

    def backward(self, args: list[Any]) -> Any:
        if self.collapse is not None:
            args = self.collapse.backward_args(args)
        slot = saved = None
        if self.saved_arg_index is not None:
            slot = self.ring.find(saved := args[self.saved_arg_index])
        try:
            out = self.executor.backward(self, slot, args, self._grad_buffers(slot))
            # Only a backward that can put gradients in its arena learns the loop: the key of
            # an accumulating one then names where .grad is (prepare captures both ways).
            # Inductor's backwards cannot; keyed by it anyway they captured again in training.
            if self.deliver is not None and self.deliver.overlay is not None:
                self.region.watch_grads(out[self.deliver.outputs[0]])
            return out
        finally:
            if slot is not None and not _torch.keep_graph():
                self.ring.release(slot, saved)

    def _note_node(self, node: Any, params: tuple[int, int]) -> None:
        """``params``: its first and last accumulated parameter's ids (``.data =`` moves the
        address, not the id)."""
        if node is not None:
            self.region.forward_nodes[node()] = params
        elif not self.region.nodes_unknown:
            self.region.nodes_unknown = True
            log.info("%s: a forward's autograd node was not found in its calling frames; its "
                     "backwards leave adding into .grad to autograd", self.name)

    def _alone_in_backward(self, slot: Slot) -> bool:
        """Whether this backward is the only one of this backward pass to feed its parameters
        (no other forward of theirs runs in it: ``f(f(x))``, a sum of microbatches' losses,
        whether their slots are pending or a saved-tensor hook let them go). Autograd sums all
        contributions to a .grad before it adds them; in-graph adds of two backwards would
        round differently. Every backward of the pass sees the same nodes (one that already
        ran still counts), so all of them decide alike."""
        if self.region.nodes_unknown:
            return False
        me, mine = _torch.current_node(), self._params.get(slot.index, ())
        key = (id(mine[0]()), id(mine[-1]())) if mine else None
        related = self.region.related.get(key, (key,))  # sets that share a parameter with it
        return not any(params in related and node is not me
                       and _torch.runs_in_this_backward(node)
                       for node, params in list(self.region.forward_nodes.items()))

    def _feeds_a_shared_parameter(self, refs: tuple) -> bool:
        """Whether another region also adds into one of these parameters: autograd sums both
        contributions and then adds once; two in-graph adds would round differently."""
        if self._shared[0] != state.accumulators_shared:
            entries = [state.accumulators.get(id(r())) for r in refs if r() is not None]
            live = {id(r) for r in state.regions.values()}  # not those Dynamo's reset dropped
            shared = any(e is not None and e[0]() is not None and len(e[1] & live) > 1
                         for e in entries)
            self._shared = (state.accumulators_shared, shared)
        return self._shared[1]

    def grads_at(self) -> tuple[int, ...]:
        """The addresses of the ``.grad`` buffers ``_grad_buffers`` last checked, which are the
        ones it returned when it returns any (its check reads them every call: nothing to read
        again)."""
        return self._checked.ptrs

    def _grad_buffers(self, slot: Slot | None) -> list[torch.Tensor] | None:
        """The ``.grad`` buffers this backward can add into itself, or None when autograd must
        do it: a buffer is missing or of another layout, a hook watches a parameter, another
        region feeds one too, or this backward records a graph (create_graph=True)."""
        if self.accumulate is None or slot is None or torch.is_grad_enabled():
            return None
        # the buffers first: after zero_grad(set_to_none=True) it stops at the first parameter,
        # before the region-wide checks below (~10 us a backward, issue 12's host cost)
        grads = _torch.accumulating_grads([ref() for ref in self._params.get(slot.index, ())],
                                          self._checked)
        if not grads:
            return None
        if (self._feeds_a_shared_parameter(self._params.get(slot.index, ()))
                or not self._alone_in_backward(slot)):
            return None
        return grads


class EagerExecutor:
    """Runs the rewritten graphs as they are: CPU, or CUDA with cudagraphs=False."""

    def forward(self, variant: Variant, slot: Slot | None, args: list[Any],
                layout: ViewLayout | None, aliases: tuple[Any, Any]) -> Any:
        views = [] if layout is None else slot_views(layout, aliases, variant.device)
        return variant.runner(Direction.FORWARD)(*args, *views)

    def backward(self, variant: Variant, slot: Slot | None, args: list[Any],
                 grads: list[torch.Tensor] | None) -> Any:
        if grads is None:
            return variant.runner(Direction.BACKWARD)(*args)
        return variant.runner(Direction.BACKWARD, True)(*args, *grads)


def boxed(fn: Callable[[list[Any]], Any]) -> Callable[[list[Any]], Any]:
    """AOTAutograd's boxed calling convention: one list argument."""

    def call(args: list[Any]) -> Any:
        return fn(list(args))

    return _torch.mark_boxed(call)


def _ran(kernel: Any) -> Any:
    """A ``kernels.Lazily`` that has run: what it runs (Inductor's code, or the ATen graph it
    fell back to, which the executor then knows as a graph: nodes named in a failed capture)."""
    return getattr(kernel, "run", None) or kernel
