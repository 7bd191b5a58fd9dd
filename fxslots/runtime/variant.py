"""One compiled forward/backward pair (a variant) and the executors that run its graphs.

Data flows one way: a variant takes a slot from its ring, evaluates its layout there, and hands
both to its executor, which runs (or replays) the graph. Executors never reach back.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import torch

from .. import _torch
from ..schemas import ArenaPlan
from .layout import SymbolBinder, ViewLayout, layout_of, reload, slot_views
from .region import Region
from .ring import Slot, SlotRing


class Direction(str, enum.Enum):
    FORWARD = "forward"
    BACKWARD = "backward"


class Executor(Protocol):
    """Runs a variant's graphs: eagerly, or as captured CUDA graphs."""

    def forward(self, variant: "Variant", slot: Slot | None, args: list[Any],
                layout: ViewLayout | None, aliases: tuple[Any, Any]) -> Any: ...

    def backward(self, variant: "Variant", slot: Slot | None, args: list[Any]) -> Any: ...


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
    anchor_index: int | None = None  # a parameter among the forward's arguments
    backward_graph: Callable[..., Any] | None = None
    saved_arg_index: int | None = None  # a backward argument that is a slot view
    offloaded_args: list[list[int]] = field(default_factory=list)  # per offloaded group
    layouts: dict[tuple, ViewLayout] = field(default_factory=dict)
    # kernels="inductor": Inductor's compiled graphs; the GraphModules above stay for analysis,
    # printing, and as what runs when Inductor could not compile one.
    forward_kernel: Callable[..., Any] | None = None
    backward_kernel: Callable[..., Any] | None = None

    def runner(self, direction: Direction) -> Callable[..., Any]:
        """What runs the graph of ``direction``: Inductor's code, else the GraphModule."""
        if direction is Direction.FORWARD:
            return self.forward_kernel or self.forward_graph
        return self.backward_kernel or self.backward_graph

    @property
    def ring(self) -> SlotRing:
        return self.region.ring

    def layout(self, args: list[Any]) -> ViewLayout:
        env = self.binder.bind(args)
        key = tuple(env.values())
        lay = self.layouts.get(key)
        if lay is None:
            lay = self.layouts[key] = layout_of(self.plan, env)
        return lay

    def forward(self, args: list[Any]) -> Any:
        if self.anchor_index is not None:
            self.ring.anchor(args[self.anchor_index])
        if not self.plan.views and not self.plan.staging:  # nothing to save, nothing to stage
            return self.executor.forward(self, None, args, None, (None, None))
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
                layout: ViewLayout | None, aliases: tuple[Any, Any]) -> Any:
        views = [] if layout is None else slot_views(layout, aliases, variant.device)
        return variant.runner(Direction.FORWARD)(*args, *views)

    def backward(self, variant: Variant, slot: Slot | None, args: list[Any]) -> Any:
        device = variant.device
        return variant.runner(Direction.BACKWARD)(*reload(
            variant.offloaded_args, args, device,
            lambda n, dtype, g: torch.empty(n, dtype=dtype, device=device)))


def boxed(fn: Callable[[list[Any]], Any]) -> Callable[[list[Any]], Any]:
    """AOTAutograd's boxed calling convention: one list argument."""

    def call(args: list[Any]) -> Any:
        return fn(list(args))

    return _torch.mark_boxed(call)
