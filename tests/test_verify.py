"""verify_forward catches a broken rewrite or plan at compile time, before any slot exists.

Each test breaks one step on purpose, through the real backend (the pass the backend calls is
replaced by the real pass followed by one corruption), and checks that compiling refuses with
the postcondition's own message. A verify_forward that checks nothing fails every test here
(tools/mutation lists that mutant).
"""

from __future__ import annotations

import dataclasses

import pytest
import sympy
import torch

import fxslots
from examples.models import MLP
from fxslots import backend
from fxslots.schemas import Write


def _compile_and_run(dynamic=None, **options):
    torch.manual_seed(0)
    c = torch.compile(MLP(16, 32, 2), backend="fxslots", options={"slots": 1, **options},
                      dynamic=dynamic)
    c(torch.randn(4, 16)).sum().backward()


def _refused(match: str, dynamic=None, **options) -> None:
    """Compiling must fail in verify_forward with ``match``, before any arena is allocated.

    ``strict=True``: without it a failed check is the documented fallback (tested below).
    """
    with pytest.raises(Exception) as ei:
        _compile_and_run(dynamic, strict=True, **options)
    cause = ei.value
    while not isinstance(cause, AssertionError) and (cause.__cause__ or cause.__context__ or
                                                     getattr(cause, "inner_exception", None)):
        cause = (getattr(cause, "inner_exception", None) or cause.__cause__
                 or cause.__context__)
    assert isinstance(cause, AssertionError), repr(ei.value)
    assert match in str(cause), str(cause)
    assert all(s.arena is None for g in fxslots.regions() for s in g.ring.slots)


def _with_plan(monkeypatch, corrupt) -> None:
    real = backend.plan_arena
    monkeypatch.setattr(backend, "plan_arena", lambda *a, **k: corrupt(real(*a, **k)))


def _slotted(plan, write=Write.OUT):
    return [i for i, p in enumerate(plan.placements) if p.write is write]


def _move(plan, index: int, offset):
    placements = list(plan.placements)
    placements[index] = dataclasses.replace(placements[index], offset=sympy.sympify(offset))
    return dataclasses.replace(plan, placements=tuple(placements))


def test_the_unbroken_pipeline_passes_and_checks_something():
    checks = []
    real = backend.verify_forward

    def counting(*a, **k):
        checks.append(real(*a, **k))
        return checks[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(backend, "verify_forward", counting)
        _compile_and_run()
    assert checks and checks[0] > 2, checks  # two saved tensors placed, at least one env


def test_a_rewrite_that_forgets_the_slot_is_refused(monkeypatch):
    monkeypatch.setattr(backend, "rewrite_forward", lambda *a, **k: 0)
    _refused("does not leave the forward through its slot")


def test_without_strict_a_failed_check_falls_back_and_trains_exactly(monkeypatch):
    monkeypatch.setattr(backend, "rewrite_forward", lambda *a, **k: 0)
    fxslots.reset()
    torch.manual_seed(0)
    eager = MLP(16, 32, 2)
    model = MLP(16, 32, 2)
    model.load_state_dict(eager.state_dict())
    compiled = torch.compile(model, backend="fxslots", options={"slots": 1})
    x = torch.randn(4, 16)
    with pytest.warns(UserWarning, match="verify_forward failed.*does not leave the forward"):
        compiled(x).sum().backward()
    eager(x).sum().backward()
    assert fxslots.counters["fallbacks"] == 1
    assert all(s.arena is None for g in fxslots.regions() for s in g.ring.slots)
    for a, b in zip(compiled.parameters(), eager.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)


def test_a_rewrite_that_returns_the_original_instead_of_the_copy_is_refused(monkeypatch):
    real = backend.rewrite_forward

    def forgets_the_copy(fw, saved, plan, n):
        changed = real(fw, saved, plan, n)
        output = next(iter(fw.graph.find_nodes(op="output")))
        outs = list(output.args[0])
        for i, node in enumerate(outs):  # the copy's source instead of the slot it filled
            if node is not None and getattr(node, "target", None) is torch.ops.aten.copy_.default:
                outs[i] = node.args[1]
        output.args = (tuple(outs),)
        fw.recompile()
        return changed

    monkeypatch.setattr(backend, "rewrite_forward", forgets_the_copy)
    _refused("does not leave the forward through its slot", copy_free=False)


# The byte checks run on symbolic plans (dynamic=True): there ArenaPlan's own constructor
# checks cannot decide (offsets like 512*ceiling(s77/4)), and verify_forward samples each
# symbol's range instead. Every corruption below gets past that constructor.


def test_overlapping_groups_are_refused(monkeypatch):
    _with_plan(monkeypatch, lambda plan: _move(plan, _slotted(plan)[1],
                                               plan.placements[_slotted(plan)[0]].offset))
    _refused("overlap in the arena at", dynamic=True)  # verify's message, not the constructor's


def test_a_misaligned_group_is_refused(monkeypatch):
    _with_plan(monkeypatch, lambda plan: _move(plan, _slotted(plan)[1],
                                               plan.placements[_slotted(plan)[1]].offset + 16))
    _refused("is not aligned", dynamic=True)


def test_a_group_past_the_arena_is_refused(monkeypatch):
    _with_plan(monkeypatch, lambda plan: dataclasses.replace(
        plan, capacity=plan.capacity - plan.alignment))
    _refused("ends past the arena (", dynamic=True)


def test_overlapping_offloaded_groups_are_refused(monkeypatch):
    def corrupt(plan):
        host = _slotted(plan, Write.OFFLOAD)
        return _move(plan, host[1], plan.placements[host[0]].offset)

    _with_plan(monkeypatch, corrupt)
    _refused("overlap in the host arena (offloaded groups)", dynamic=True,
             offload="all")


def test_verify_checks_only_shapes_dynamo_allows():
    """``view(b, t, 2, d // 2)`` under dynamic shapes makes Dynamo guard d even. The saved
    transposed view (copied: copy_free=False) does not fit its group at odd d, which never runs;
    verify sampled d = 9 and refused the plan (a silent fallback, found by the large fuzz
    profile). It samples only where the guards hold now."""
    from tests.fuzz_models import Case, check_case

    check_case(Case(ops=("view_heads",), shapes=((1, 2),), schedules=((("F", 0, 0), ("D", 0),
                    ("Z",)),), slots=1, dynamic=True, mutate_input=True, two_outputs=False,
                    options=(("copy_free", False), ("alignment", 16), ("partitioner", "default"),
                             ("recompute", "pointwise")), seed=0))


def test_verify_checks_a_size_a_guard_pins():
    """Fuzz draw 50029 (session 45's review): Dynamo's guards pin one head dimension at 8 (an
    even size whose half times two is 8) yet leave it a symbol; verify sampled 11 and refused
    the plan, and the graph ran without slots. Verify samples the pinned size now."""
    from tests.fuzz_models import Case, check_case

    check_case(Case(ops=("dropout", "view_heads", "inplace_view", "matmul", "float64"),
                    shapes=((1, 6), (4, 6), (3, 2)), schedules=((("F", 0, 2), ("B", 0), ("Z",)),),
                    slots=1, dynamic=True, mutate_input=False, two_outputs=False,
                    options=(("debug", False), ("copy_free", False), ("partitioner", "default")),
                    seed=46855), device="cpu", exact=True)
