"""What one compile produced, kept for ``explain``, plots and the structured trace."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch.fx as fx

from . import _torch
from .schemas import ArenaPlan, SavedSet


@dataclass(frozen=True)
class GraphLine:
    """One non-placeholder node of a graph, as a timeline needs it."""

    name: str  # "return" for the output node
    target: str
    reads: tuple[str, ...]  # names of the nodes among its arguments, in order
    aliases: bool = False  # its result views an input's bytes (reading it reads them)


def graph_lines(gm: fx.GraphModule) -> tuple[GraphLine, ...]:
    lines = []
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            continue
        reads = tuple(dict.fromkeys(a.name for a in n.all_input_nodes))
        if n.op == "output":
            lines.append(GraphLine("return", "output", reads))
        else:
            lines.append(GraphLine(n.name, str(getattr(n.target, "__name__", n.target)), reads,
                                   _torch.returns_view(n.target)))
    return tuple(lines)


@dataclass
class CompiledGraphs:
    """What one compile produced (a plan, or the reason it runs without slots)."""

    variant: Any  # runtime.Variant, or None when the graph falls back
    saved: SavedSet | None
    plan: ArenaPlan | None
    forward_before: str
    forward_after: str
    backward: str = ""
    delivering: str = ""  # under CUDA graphs: the backward that writes gradients to the buffer
    fallback: str | None = None
    forward_lines: tuple[GraphLine, ...] = ()
    backward_lines: tuple[GraphLine, ...] = ()
    kernels: tuple[str, ...] = ()  # kernels="inductor": who writes each group's slot bytes
    partitioner: str = ""  # the partitioner that split forward from backward ("auto" resolved)
    recomputed: tuple[str, ...] = ()  # forward ops the recompute policy moved to the backward
    recompute: str = "none"  # that policy's name
    inference: str = ""  # an inference graph: how it runs (captured, or why not)

    @classmethod
    def of_inference(cls, graph: str, how: str) -> CompiledGraphs:
        """An inference graph's record: its graph as printed (nothing rewrote it), and how."""
        return cls(None, None, None, graph, graph, inference=how)
