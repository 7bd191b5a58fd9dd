"""Verify: the postconditions of planning and rewriting, checked on the result.

Raises AssertionError naming the broken postcondition; a failure here is a bug in fxslots, and
it is raised at compile time, before any slot byte is written.
"""

from __future__ import annotations

import itertools

import sympy
import torch
import torch.fx as fx

from .. import _torch
from ..schemas import ArenaPlan, SavedSet, Write, evaluate
from .rewrite import SLOT_META


def verify_forward(fw: fx.GraphModule, saved: SavedSet, plan: ArenaPlan,
                   num_fwd_outputs: int) -> int:
    """Check the rewritten ``fw`` against ``plan``; returns the number of checks made."""
    checks = _check_placed(fw, saved, plan, num_fwd_outputs)
    checks += _check_bytes(plan, saved)
    return checks


def _check_placed(fw, saved, plan, num_fwd_outputs) -> int:
    """Every saved edge of a slotted group now leaves the forward through its slot."""
    output = next(iter(fw.graph.find_nodes(op="output")))
    # Saved tensors come right after the user outputs, before the saved symints.
    returned = output.args[0][num_fwd_outputs:num_fwd_outputs + len(saved.tensors)]
    written = _storages_written_out(fw)
    for t, node in zip(saved.tensors, returned, strict=True):
        p = plan.placement(t.group)
        if p.write in (Write.NONE, Write.STAGED):
            assert node.name == t.name, f"unslotted {t.name} was rewritten to {node}"
        else:
            assert _in_slot(node, written), (
                f"saved tensor {t.name} (group {t.group}, {p.write.value}) does not leave the "
                f"forward through its slot; the forward returns {node}")
    return len(saved.tensors)


def _storages_written_out(fw: fx.GraphModule) -> set:
    """Storages that an out= node writes into a slot view (views of them are in the slot too)."""
    keys = set()
    for n in fw.graph.nodes:
        out = n.kwargs.get("out") if n.op == "call_function" else None
        if isinstance(out, fx.Node) and _in_slot(out, set()) and "val" in n.meta:
            keys.add(_torch.storage_key(n.meta["val"]))
    return keys


def _in_slot(node: fx.Node, written: set) -> bool:
    if node.op == "placeholder":
        return SLOT_META in node.meta
    if node.target is torch.ops.aten.copy_.default:
        return _in_slot(node.args[0], written)
    v = node.meta.get("val")
    return isinstance(v, torch.Tensor) and _torch.storage_key(v) in written


def _sample_envs(saved: SavedSet, free: set):
    """Symbol values to check symbolic plans at: each range's ends and a middle value."""
    choices = []
    for s in sorted(free, key=str):
        lo, hi = saved.symbol_ranges.get(s, (2, None))
        lo = max(lo, 2)
        hi = hi if hi is not None else max(lo, 4096)
        choices.append([(s, v) for v in sorted({lo, min(hi, lo + 7), hi})])
    for combo in itertools.islice(itertools.product(*choices), 64):
        yield dict(combo)


def _check_bytes(plan: ArenaPlan, saved: SavedSet) -> int:
    """No two groups share a live byte; every view lies inside the arena; offsets aligned."""
    exprs = [plan.capacity, plan.host_capacity] + [
        e for p in plan.placements for e in (p.offset, p.nbytes)] + [
        e for v in plan.staging for e in (v.storage_offset, *v.shape, *v.stride)]
    free = set().union(*(sympy.sympify(e).free_symbols for e in exprs))
    n = 0
    for env in _sample_envs(saved, free):
        cap = evaluate(plan.capacity, env)
        spans = sorted([(evaluate(p.offset, env), evaluate(p.nbytes, env), p.group)
                        for p in plan.placements if p.write.owns_bytes] + [
            (evaluate(v.storage_offset, env) * v.dtype.itemsize, _view_bytes(v, env), v.name)
            for v in plan.staging], key=lambda span: span[:2])  # names and ids don't compare
        for (a, an, ga), (b, _, gb) in zip(spans, spans[1:]):
            assert a + an <= b, f"groups {ga} and {gb} overlap at {env}"
        for off, nb, g in spans:
            assert off % plan.alignment == 0, f"group {g} offset {off} is not aligned at {env}"
            assert off + nb <= cap, f"group {g} ends past the arena ({off}+{nb} > {cap}) at {env}"
        host_cap = evaluate(plan.host_capacity, env)
        host = sorted((evaluate(p.offset, env), evaluate(p.nbytes, env), p.group)
                      for p in plan.placements if p.write is Write.OFFLOAD)  # ids: ints
        for (a, an, ga), (b, _, gb) in zip(host, host[1:]):
            assert a + an <= b, f"offloaded groups {ga} and {gb} overlap at {env}"
        assert all(off + nb <= host_cap for off, nb, _ in host), f"host arena overflow at {env}"
        n += 1
    return n


def _view_bytes(v, env) -> int:
    from ..runtime.layout import span_elements

    return span_elements([evaluate(x, env) for x in v.shape],
                         [evaluate(x, env) for x in v.stride]) * v.dtype.itemsize
