"""Verify: the postconditions of planning and rewriting, checked on the result.

Raises AssertionError naming the broken postcondition; a failure here is a bug in fxslots. It
is raised at compile time, before any slot byte is written, and the backend turns it into the
documented fallback (the graph runs without slots; strict=True raises it).
"""

from __future__ import annotations

import itertools
import operator
from typing import Any

import sympy
import torch
import torch.fx as fx

from .. import _torch
from ..geometry import evaluate, guarded_symbol_values, itemsize, span_elements
from ..schemas import ArenaPlan, SavedSet, Write
from ..schemas import SLOT_META


def verify_forward(fw: fx.GraphModule, saved: SavedSet, plan: ArenaPlan,
                   num_fwd_outputs: int) -> int:
    """Check the rewritten ``fw`` against ``plan``; returns the number of checks made."""
    checks = _check_placed(fw, saved, plan, num_fwd_outputs)
    checks += _check_bytes(plan, saved)
    return checks


def _check_placed(fw, saved, plan, num_fwd_outputs) -> int:
    """Every saved edge of a slotted group now leaves the forward through its slot."""
    output = next(iter(fw.graph.find_nodes(op="output")))
    returned = output.args[0]
    written = _storages_written_out(fw)
    for t in saved.tensors:
        node = returned[t.output_index]
        p = plan.placement(t.group)
        if p.write in (Write.NONE, Write.STAGED):
            assert node.name == t.name, f"unslotted {t.name} was rewritten to {node}"
        else:
            assert _in_slot(node, written), (
                f"saved tensor {t.name} (group {t.group}, {p.write.value}) does not leave the "
                f"forward through its slot; the forward returns {node}")
    return len(saved.tensors)


def _storages_written_out(fw: fx.GraphModule) -> set:
    """Storages some node writes into a slot view (views of them are in the slot too)."""
    keys = set()
    for n in fw.graph.nodes:
        if n.op != "call_function":
            continue
        val = n.meta.get("val")
        for k, v in enumerate(val if isinstance(val, (tuple, list)) else (val,)):
            if isinstance(v, torch.Tensor) and _is_slot_view(_written_into(n, k)):
                keys.add(_torch.storage_key(v))
    return keys


def _written_into(node: Any, k: int = 0) -> Any:
    """What output ``k`` of ``node`` is, followed through the rewrite's pass-throughs: the
    argument an out= or in-place op returns, the element ``(x,)[0]`` picks; else ``node``."""
    if not isinstance(node, fx.Node) or node.op != "call_function":
        return node
    if node.target is operator.getitem:
        base, i = node.args
        return (_written_into(base[i]) if isinstance(base, (tuple, list))
                else _written_into(base, i))
    if not isinstance(node.target, _torch.OpOverload):
        return node
    schema = _torch.op_schema(node.target)
    if k >= len(schema.returns) or schema.returns[k].alias_info is None:
        return node
    sets = schema.returns[k].alias_info.before_set
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.before_set == sets:
            arg = node.args[i] if i < len(node.args) else node.kwargs.get(a.name)
            return _written_into(arg)
    return node


def _is_slot_view(node: Any) -> bool:
    return isinstance(node, fx.Node) and node.op == "placeholder" and SLOT_META in node.meta


def _in_slot(node: fx.Node, written: set) -> bool:
    if _is_slot_view(_written_into(node)):
        return True
    v = node.meta.get("val")
    return isinstance(v, torch.Tensor) and _torch.storage_key(v) in written


def _check_bytes(plan: ArenaPlan, saved: SavedSet) -> int:
    """No two groups share a live byte; every view lies inside the arena and every member
    inside its group's bytes; offsets aligned. Checked at sample shapes."""
    exprs = [plan.capacity, plan.host_capacity] + [
        e for p in plan.placements for e in (p.offset, p.nbytes)] + [
        e for v in plan.staging for e in (v.storage_offset, *v.shape, *v.stride)]
    free = set().union(*(sympy.sympify(e).free_symbols for e in exprs))
    free |= set().union(*(e.free_symbols for t in saved.tensors
                          for e in (*t.shape, *t.stride, t.storage_offset)))
    n = 0
    for env in guarded_symbol_values(saved.symbol_ranges, free, saved.symbol_guards):
        ev = _Evaluator(env)
        spans = sorted([(ev(p.offset), ev(p.nbytes), p.group)
                        for p in plan.placements if p.write.owns_bytes] + [
            (ev(v.storage_offset) * itemsize(v.dtype), ev.span(v) * itemsize(v.dtype), v.name)
            for v in plan.staging], key=lambda span: span[:2])  # names and ids don't compare
        _check_disjoint(spans, ev(plan.capacity), plan.alignment, env, "the arena")
        host = sorted((ev(p.offset), ev(p.nbytes), p.group)
                      for p in plan.placements if p.write is Write.OFFLOAD)  # ids: ints
        _check_disjoint(host, ev(plan.host_capacity), plan.alignment, env,
                        "the host arena (offloaded groups)")
        _check_members_inside(plan, saved, ev)
        n += 1
    return n


class _Evaluator:
    """Sizes at one sample shape, each expression evaluated once (a graph repeats a few
    sizes and strides many times)."""

    def __init__(self, env):
        self.env, self.memo = env, {}

    def __call__(self, e) -> int:
        if e not in self.memo:
            self.memo[e] = evaluate(e, self.env)
        return self.memo[e]

    def span(self, t) -> int:
        """Elements a tensor (or view) spans, from its evaluated sizes and strides."""
        return span_elements([self(x) for x in t.shape], [self(x) for x in t.stride])


def _check_disjoint(spans, capacity: int, alignment: int, env, where: str) -> None:
    for (a, an, ga), (b, _, gb) in itertools.pairwise(spans):
        assert a + an <= b, f"groups {ga} and {gb} overlap in {where} at {env}"
    for off, nb, g in spans:
        assert off % alignment == 0, f"group {g} offset {off} in {where} is not aligned at {env}"
        assert off + nb <= capacity, (
            f"group {g} ends past {where} ({off}+{nb} > {capacity}) at {env}")


def _check_members_inside(plan: ArenaPlan, saved: SavedSet, ev: _Evaluator) -> None:
    """Every saved tensor's bytes lie inside its group's placement (the planner sizes a
    dense tensor by its element count: this checks that count is its whole span)."""
    for t in saved.tensors:
        p = plan.placement(t.group)
        if not (p.write.owns_bytes or p.write is Write.OFFLOAD):
            continue
        start = ev(p.member_offset(t))
        end = start + ev.span(t) * t.itemsize
        # a member of no elements reads no bytes, wherever its offset (split halves of an
        # empty batch: the second starts past the end of a group of 0 bytes)
        assert end == start or ev(p.offset) <= start and end <= ev(p.offset) + ev(p.nbytes), (
            f"saved tensor {t.name} [{start}, {end}) lies outside group {t.group} at {ev.env}")
