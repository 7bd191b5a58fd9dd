"""One compiled forward/backward pair (a variant) and the executors that run its graphs.

Data flows one way: a variant takes a slot from its ring, evaluates its layout there, and hands
both to its executor, which runs (or replays) the graph. Executors never reach back.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import torch

from .. import _torch, fallback, policies, state
from ..schemas import ArenaPlan
from .layout import SymbolBinder, ViewLayout, layout_of, slot_views
from .feeds import Feeds
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

    def set_died(self, params: int) -> None:
        """The parameter set ``params`` died (``Region.track_set``): forget its graphs."""


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
    feeds: Feeds = field(init=False)  # its parameters, and whether its backward adds to .grad
    # Inputs that get a gradient but are saved as computed values (grads.unlinked_inputs): a
    # create_graph=True backward's gradients are not linked to them
    unlinked: int = 0
    _unlinked_noted: bool = False
    # kernels="inductor": Inductor's compiled graphs; the GraphModules above stay for analysis,
    # printing, and as what runs when Inductor could not compile one.
    forward_kernel: Callable[..., Any] | None = None
    backward_kernel: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        self.feeds = Feeds(self.name, self.region)

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
                self.feeds.note(args, self.accumulate.indices, _torch.calling_node(), None)
            return self.executor.forward(self, None, args, None, (None, None))
        lay = self.layout(args)
        self.region.note_forward()
        # By identity, not address: a parameter given new memory (``.data =``, FSDP's regathered
        # shards) is the same module's, and its graphs are found moved and captured again
        params = 0
        if self.anchors:
            anchors = (args[self.anchors[0]], args[self.anchors[1]])
            params = hash((id(anchors[0]), id(anchors[1])))
            self.region.track_set(params, anchors)
        slot, alias, host_alias = self.ring.acquire(lay.nbytes, self.device, self.name,
                                                    lay.host_nbytes, params, _torch.calling_node())
        slot.layout, slot.saved_outs = lay, None
        slot.watched = _torch.saved_tensors_watched()
        if self.accumulate is not None:
            self.feeds.note(args, self.accumulate.indices, slot.node, slot)
        elif self.backward_graph is None:  # which parameters it feeds is yet unknown
            self.feeds.remember(args, self.candidates, slot)
        try:
            out = self.executor.forward(self, slot, args, lay, (alias, host_alias))
            del alias, host_alias
        except BaseException:
            self.ring.release(slot)
            raise
        return out

    def backward(self, args: list[Any]) -> Any:
        recording = _torch.records_graph()  # create_graph=True
        if recording and self.unlinked:
            self._unlinked_noted = fallback.no_second_order(
                self.name, self.unlinked, self.ring.options.strict, self._unlinked_noted)
        if self.collapse is not None:
            args = self.collapse.backward_args(args)
        slot = saved = None
        if self.saved_arg_index is not None:
            slot = self.ring.find(saved := args[self.saved_arg_index])
        try:
            grads = None if recording else self._grad_buffers(slot)
            out = self.executor.backward(self, slot, args, grads)
            if (grads is None and slot is not None and self.accumulate is not None
                    and not torch.is_grad_enabled()):
                self.feeds.watch(slot, self.accumulate.indices,
                                [out[i] for i in self.accumulate.indices])
            # Only a backward that can put gradients in its arena learns the loop: the key of
            # an accumulating one then names where .grad is (prepare captures both ways).
            # Inductor's backwards cannot; keyed by it anyway they captured again in training.
            if self.deliver is not None and self.deliver.overlay is not None:
                self.region.watch_grads(out[self.deliver.outputs[0]])
            return out
        finally:
            if slot is not None and not _torch.keep_graph():
                self.ring.release(slot, saved)
            elif slot is not None:  # the graph may run backward again: it holds the slot
                slot.retained = True

    def grads_at(self) -> tuple[int, ...]:
        return self.feeds.grads_at()

    def _grad_buffers(self, slot: Slot | None) -> list[torch.Tensor] | None:
        """The ``.grad`` buffers this backward adds into itself, or None (``Feeds.buffers``);
        never where it records a graph (create_graph=True)."""
        if self.accumulate is None or slot is None or torch.is_grad_enabled():
            return None
        return self.feeds.buffers(slot)


class EagerExecutor:
    """Runs the rewritten graphs as they are: CPU, or CUDA with cudagraphs=False."""

    def set_died(self, params: int) -> None:
        pass

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
