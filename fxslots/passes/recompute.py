"""Recompute: tag forward ops of the joint graph that the partitioner should recompute in backward
instead of saving, the way selective activation checkpointing tags them."""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx as fx
from torch.utils.checkpoint import CheckpointPolicy

from .._torch import returns_view
from .collect import mutated_placeholders


def tag_recompute(joint: fx.GraphModule, choose: Callable[[Any], bool],
                  num_fwd_outputs: int | None = None) -> frozenset[str]:
    """Tag the forward ops ``choose`` picks as "prefer recompute"; returns the names of those
    the forward's outputs need (its first ``num_fwd_outputs``): the backward's own constants (a
    0-d scalar its formula builds, read by no tangent) are tagged too, so that no partitioner
    moves them into the forward to save them, but they are no forward op recomputed.

    Never tags an op computed from an input the graph mutates: backward would recompute it from
    the mutated value (a wrong gradient, with no error to say so) and would have to save the
    mutated input itself, whose new autograd history points back at this graph (a reference
    cycle autograd never frees: the fuzzer saw a dropped microbatch's slot never come back).
    Functionalization copies an input before mutating it (``clone(primals_k)``), so such
    clones, and everything computed from them, stay untagged too.
    """
    mutated = mutated_placeholders(joint)
    forward = None if num_fwd_outputs is None else _needed_by_outputs(joint, num_fwd_outputs)
    backward: set[fx.Node] = set()
    tainted: set[fx.Node] = set(mutated)
    tagged: set[str] = set()
    for n in joint.graph.nodes:
        inputs = n.all_input_nodes
        if (n.op == "placeholder" and "tangent" in n.name) or any(a in backward for a in inputs):
            backward.add(n)
            continue
        if any(a in tainted for a in inputs) or _clones_an_input(n):
            tainted.add(n)
            continue
        if n.op == "call_function" and "recompute" not in n.meta and choose(n):
            _tag_with_views(n)
            if forward is None or n in forward:
                tagged.add(n.name)
    return frozenset(tagged)


def _needed_by_outputs(joint: fx.GraphModule, count: int) -> set[fx.Node]:
    """The nodes the joint graph's first ``count`` outputs (the forward's) are computed from."""
    outputs = next(iter(joint.graph.find_nodes(op="output"))).args[0]  # one flat list
    todo = [a for a in list(outputs)[:count] if isinstance(a, fx.Node)]
    seen: set[fx.Node] = set()
    while todo:
        if (n := todo.pop()) not in seen:
            seen.add(n)
            todo += n.all_input_nodes
    return seen


def _tag_with_views(n: fx.Node) -> None:
    """Tag ``n`` and the views of it (getitems of an op with several outputs included): the
    default partitioner saves any untagged node the backward reads, and a saved view keeps the
    whole value, so they are recomputed with it (free: a view moves no bytes)."""
    todo = [n]
    while todo:
        m = todo.pop()
        if "recompute" in m.meta and m is not n:
            continue
        m.meta["recompute"] = CheckpointPolicy.PREFER_RECOMPUTE
        m.meta["ac_graph_id"] = 0
        todo += [u for u in m.users if u.op == "call_function" and returns_view(u.target)]


def recomputed_ops(bw: fx.GraphModule, tagged: frozenset[str]) -> tuple[str, ...]:
    """The tagged forward ops the partitioner really put in ``bw`` (it may still save one, for
    instance at the edge of a checkpointed region): their names, in backward order."""
    return tuple(n.name for n in bw.graph.nodes if n.op == "call_function" and n.name in tagged)


def _clones_an_input(n: fx.Node) -> bool:
    return (n.op == "call_function" and n.target is torch.ops.aten.clone.default
            and isinstance(n.args[0], fx.Node) and n.args[0].op == "placeholder")
