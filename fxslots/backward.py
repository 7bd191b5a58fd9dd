"""The backward half of a variant's passes, run while its forward compiles.

AOTAutograd compiles a backward lazily, at the first ``.backward()`` (or, where symbolic ints
are saved, right after the forward, logging a failure and retrying at the first backward). By
then the forward has committed to its slots, so a pass failing there could only stop the
user's training. ``prepare_backward`` therefore runs the backward's passes on a copy of the
partitioner's backward inside the forward's compile, where a failure still falls back, and
``take_backward`` hands that copy over when AOTAutograd compiles the same graph.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from .costs import DeviceCaps
from .passes import annotate_backward, observe, snapshot
from .passes.offload import schedule_reload
from .passes.unalias import unalias_outputs
from .schemas import ArenaPlan, SavedSet

Signature = tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class BackwardRewrite:
    """What the backward's passes need, all fixed once the forward's plan is: the plan's
    NONE / OFFLOAD / slot split, the only part of it they read, is one Inductor's audit of the
    forward keeps (it turns slot writes into copies or back, nothing else)."""
    saved: SavedSet
    plan: ArenaPlan
    caps: DeviceCaps
    device: torch.device
    window: Any  # options.offload_window: "auto" or bytes

    def apply(self, bw: fx.GraphModule) -> None:
        observe("unalias_outputs", unalias_outputs, bw, self.saved, self.plan, graph=bw,
                summary=lambda n: f"{n} outputs that view the slot copied out")
        annotate_backward(bw, self.saved, self.plan)
        if self.plan.offloaded_bytes != 0:
            observe("schedule_reload", schedule_reload, bw, self.saved, self.plan, self.caps,
                    self.device, self.window, graph=bw, summary=str)


@dataclass(frozen=True)
class PreparedBackward:
    """A backward rewritten ahead of its compile. Invariant: ``graph`` is ``rewrite`` applied
    to a graph whose nodes ``source`` lists (op, name, target, args, kwargs, in order)."""
    source: Signature
    graph: fx.GraphModule
    rewrite: BackwardRewrite


def prepare_backward(bw: fx.GraphModule, rewrite: BackwardRewrite) -> PreparedBackward:
    """``rewrite`` applied to a copy of ``bw``: its failure is the forward's fallback."""
    copy = snapshot(bw)()
    rewrite.apply(copy)
    return PreparedBackward(signature(bw.graph), copy, rewrite)


def take_backward(prepared: PreparedBackward, bw: fx.GraphModule, what: str) -> fx.GraphModule:
    """The rewritten backward for ``bw``, the graph AOTAutograd compiles now: the one prepared
    ahead when ``bw`` is the graph it was prepared from (AOTAutograd passes a copy of the
    partitioner's), else ``bw`` rewritten now, which can no longer fall back."""
    if signature(bw.graph) == prepared.source:
        return prepared.graph
    warnings.warn(f"fxslots: the {what} differs from the graph the partitioner returned; its "
                  "passes run again now, where a failure can no longer fall back", stacklevel=2)
    prepared.rewrite.apply(bw)
    return bw


def signature(graph: fx.Graph) -> Signature:
    return tuple((n.op, n.name, str(n.target), str(n.args), str(n.kwargs)) for n in graph.nodes)
