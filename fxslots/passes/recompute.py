"""Recompute: tag forward ops of the joint graph that the partitioner should recompute in backward
instead of saving, the way selective activation checkpointing tags them."""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx as fx
from torch.utils.checkpoint import CheckpointPolicy

from .collect import mutated_placeholders


def tag_recompute(joint: fx.GraphModule, choose: Callable[[Any], bool]) -> int:
    """Tag the forward ops ``choose`` picks as "prefer recompute"; returns how many.

    Never tags an op computed from an input the graph mutates: backward would recompute it from
    the mutated value (a wrong gradient, with no error to say so) and would have to save the
    mutated input itself, whose new autograd history points back at this graph (a reference
    cycle autograd never frees: the fuzzer saw a dropped microbatch's slot never come back).
    Functionalization copies an input before mutating it (``clone(primals_k)``), so such
    clones, and everything computed from them, stay untagged too.
    """
    mutated = mutated_placeholders(joint)
    backward: set[fx.Node] = set()
    tainted: set[fx.Node] = set(mutated)
    tagged = 0
    for n in joint.graph.nodes:
        inputs = n.all_input_nodes
        if (n.op == "placeholder" and "tangent" in n.name) or any(a in backward for a in inputs):
            backward.add(n)
            continue
        if any(a in tainted for a in inputs) or _clones_an_input(n):
            tainted.add(n)
            continue
        if n.op == "call_function" and "recompute" not in n.meta and choose(n):
            n.meta["recompute"] = CheckpointPolicy.PREFER_RECOMPUTE
            n.meta["ac_graph_id"] = 0
            tagged += 1
    return tagged


def _clones_an_input(n: fx.Node) -> bool:
    return (n.op == "call_function" and n.target is torch.ops.aten.clone.default
            and isinstance(n.args[0], fx.Node) and n.args[0].op == "placeholder")
