"""fxslots.pipelining on real torch.distributed.pipelining schedules, every stage on this one
rank (gloo, CPU): slots from the schedule are enough and no fewer would do, arena groups share
bytes, zero-bubble's split backward runs, and setup errors name the fix."""

from __future__ import annotations

import warnings

import pytest
import torch

import fxslots
import fxslots.pipelining as fp
from fxslots import _torch
from tests.helpers import skip_stages_sharing_a_rank, torch_before
from tests.test_graph_executor_cpu import _StandInGraph, stand_in_graphs  # noqa: F401
from tests.test_pipelining import _block, process_group  # noqa: F401

pipelining = pytest.importorskip("torch.distributed.pipelining")

pytestmark = pytest.mark.usefixtures("process_group")  # gloo, one rank

SCHEDULES = [("ScheduleGPipe", 1), ("Schedule1F1B", 1), ("ScheduleInterleaved1F1B", 2),
             ("ScheduleInterleaved1F1B", 4), ("ScheduleLoopedBFS", 2),
             ("ScheduleInterleavedZeroBubble", 2), ("ScheduleZBVZeroBubble", 2)]


def _schedule(name, modules, n_microbatches=4):
    cpu = torch.device("cpu")
    stages = [pipelining.PipelineStage(m, stage_index=i, num_stages=len(modules), device=cpu)
              for i, m in enumerate(modules)]
    return getattr(pipelining, name)(stages if len(stages) > 1 else stages[0],
                                     n_microbatches=n_microbatches,
                                     loss_fn=lambda out, y: torch.nn.functional.mse_loss(out, y))


def _steps(schedule, n=2):
    skip_stages_sharing_a_rank(len(_torch.schedule_stages(schedule)))
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)
    for _ in range(n):  # gradients accumulate in persistent .grad buffers
        schedule.step(x, target=y)


def _root(error):
    while not isinstance(error, fxslots.FxslotsError) and (error.__cause__ or error.__context__):
        error = error.__cause__ or error.__context__
    return error


def _compiled_by_hand(name, n, options_of):
    """A schedule whose stages are compiled with ``options_of(stage)``, past the plan's check."""
    schedule = _schedule(name, [_block(i) for i in range(n)])
    for stage in _torch.schedule_stages(schedule):
        stage.submod = torch.compile(stage.submod, backend="fxslots",
                                     options=options_of(stage.stage_index))
    return schedule


def _refused(name):
    """Whether this torch cannot run ``name``'s weight step over a compiled stage (before 2.13):
    compile_stages refuses it, and a schedule compiled by hand fails in torch's own W step."""
    return "ZeroBubble" in name and _torch.split_backward_hazard() is not None


def _skip_where_refused(name):
    if _refused(name):
        pytest.skip(f"torch {torch.__version__} cannot run {name} over compiled stages")


def test_zero_bubble_is_refused_where_torch_frees_the_weight_steps_nodes(monkeypatch):
    assert (_torch.split_backward_hazard() is not None) == torch_before(2, 13)
    monkeypatch.setattr(_torch, "split_backward_hazard", lambda: "torch X frees them")
    for name, n in SCHEDULES:
        schedule = _schedule(name, [_block(i) for i in range(n)])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if "ZeroBubble" not in name:
                fp.compile_stages(schedule)
                continue
            with pytest.raises(fxslots.OptionsError, match=rf"compile_stages: {name} splits "
                               r"backward .* and torch X frees them; use Schedule1F1B"):
                fp.compile_stages(schedule)
        assert not any(type(s.submod).__name__ == "OptimizedModule"
                       for s in _torch.schedule_stages(schedule))


@pytest.mark.parametrize("name, n", SCHEDULES)
def test_slots_from_the_schedule_run_it_bitwise_like_eager(name, n):
    ours, ref = [_block(i) for i in range(n)], [_block(i) for i in range(n)]
    schedule = _schedule(name, ours)
    if _refused(name):
        with pytest.raises(fxslots.OptionsError, match="torch 2.13 or later"):
            fp.compile_stages(schedule)
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = fp.compile_stages(schedule)
    split = any(r.split_backward for r in plan.ranks.values())
    assert split == ("ZeroBubble" in name)
    assert split == any("twice the backward work" in str(w.message) for w in caught)
    _steps(schedule)
    _steps(_schedule(name, ref))
    for a, b in zip([p for m in ours for p in m.parameters()],
                    [p for m in ref for p in m.parameters()], strict=True):
        assert torch.equal(a.grad, b.grad)
    assert sum(r.ring.pending() for r in fxslots.regions()) == 0


@pytest.mark.parametrize("name", ["ScheduleGPipe", "Schedule1F1B"])
def test_the_schedules_own_eval_runs_between_steps(name):
    """``schedule.eval`` runs the forwards with grad enabled and no backward: under the plan's
    one slot for 1F1B the second microbatch found none, and every step after it too (found by a
    review). ``compile_stages`` runs it under no_grad: its losses are eager's, and training
    goes on bitwise eager's."""
    if not hasattr(getattr(pipelining, name), "eval"):
        pytest.skip(f"torch {torch.__version__}'s schedules have no eval")
    ours, ref = _block(0), _block(0)
    schedules = [_schedule(name, [ours]), _schedule(name, [ref])]
    fp.compile_stages(schedules[0])
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)
    for step in range(3):
        losses = [[], []]
        for schedule, kept in zip(schedules, losses, strict=True):
            schedule.step(x, target=y)
            schedule.eval(x, target=y, losses=kept)
        assert [float(v) for v in losses[0]] == [float(v) for v in losses[1]], step
    for a, b in zip(ours.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)
    assert sum(r.ring.pending() for r in fxslots.regions()) == 0


def _later(schedule, name, n_microbatches=4):
    """A schedule built on the stage ``compile_stages`` compiled for ``schedule``, as one schedule
    per sequence length does (examples/pipeline_gpt.py): compile_stages never sees it."""
    [stage] = _torch.schedule_stages(schedule)
    return _schedule(name, [stage.submod], n_microbatches)


@pytest.mark.parametrize("name", ["ScheduleGPipe", "Schedule1F1B"])
def test_a_later_schedules_eval_over_the_compiled_stage_holds_no_slots(name):
    """compile_stages ran only its own schedule's eval under no_grad: a later schedule's eval
    ran its forwards with grad and no backward, and under 1F1B's one slot the second
    microbatch found none (found by a review). Every schedule over a compiled stage evaluates
    without grad: losses and gradients are the eager pipeline's."""
    if not hasattr(getattr(pipelining, name), "eval"):
        pytest.skip(f"torch {torch.__version__}'s schedules have no eval")
    ours, ref = _block(0), _block(0)
    first = _schedule(name, [ours])
    fp.compile_stages(first)
    schedules = [first, _later(first, name)], [_schedule(name, [ref]), _schedule(name, [ref])]
    g = torch.Generator().manual_seed(0)
    for step in range(2):
        for k in range(2):
            x, y = torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)
            losses = [[], []]
            for pipeline, kept in zip(schedules, losses, strict=True):
                pipeline[k].step(x, target=y)
                pipeline[k].eval(x, target=y, losses=kept)
            assert torch.equal(*(torch.stack(v).detach() for v in losses)), (step, k)
    for a, b in zip(ours.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)
    assert sum(r.ring.pending() for r in fxslots.regions()) == 0


def test_a_later_schedule_needing_more_slots_is_refused_before_it_runs():
    """GPipe over 8 microbatches on a stage compile_stages planned for 4: the step raised
    SlotsExhaustedError mid-step, advising an option 'slots' the user never set (found by a
    review). Its first step is refused before anything runs, naming the schedule, what it
    keeps in flight and the fix; its eval, which holds no slot, runs; the first schedule
    trains on as the eager pipeline does."""
    ours, ref = _block(0), _block(0)
    first, eager = _schedule("ScheduleGPipe", [ours]), _schedule("ScheduleGPipe", [ref])
    fp.compile_stages(first)
    later = _later(first, "ScheduleGPipe", n_microbatches=8)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)
    for schedule in (first, eager):
        schedule.step(x, target=y)
    before = [p.grad.clone() for p in ours.parameters()]
    for _ in range(2):  # refused at each step, not only the first
        with pytest.raises(fxslots.OptionsError, match=(
                r"ScheduleGPipe.step refused before it runs: ScheduleGPipe over 8 "
                r"microbatches keeps up to 8 microbatches of stage 0 .* compiled stage 0 for "
                r"ScheduleGPipe #\d+ with the fxslots option 'slots' 4; call compile_stages "
                r"with the schedule that keeps the most in flight .* or pass slots=8 to "
                r"compile_stages")):
            later.step(x, target=y)
    assert all(torch.equal(p.grad, b) for p, b in zip(ours.parameters(), before, strict=True))
    assert sum(r.ring.pending() for r in fxslots.regions()) == 0
    if hasattr(later, "eval"):  # (torch's GPipe scales the gradients in eval too)
        losses = [[], []]
        later.eval(x, target=y, losses=losses[0])
        _schedule("ScheduleGPipe", [ref], 8).eval(x, target=y, losses=losses[1])
        assert torch.equal(*(torch.stack(v).detach() for v in losses))
    for schedule in (first, eager):
        schedule.step(x, target=y)
    for a, b in zip(ours.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)


@pytest.mark.parametrize("how", ["slots", "largest first"])
def test_stages_compiled_for_the_most_in_flight_run_every_later_schedule(how):
    """The two fixes the refusal names: ``slots=8``, or compiling the stage with the schedule
    that keeps the most in flight. Both schedules then train bitwise like eager's."""
    ours, ref = _block(0), _block(0)
    counts = (4, 8) if how == "slots" else (8, 4)
    first = _schedule("ScheduleGPipe", [ours], counts[0])
    fp.compile_stages(first, **({"slots": 8} if how == "slots" else {}))
    ours_all = [first, _later(first, "ScheduleGPipe", counts[1])]
    eager = [_schedule("ScheduleGPipe", [ref], n) for n in counts]
    g = torch.Generator().manual_seed(0)
    for _ in range(2):
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)
        for schedule in (*ours_all, *eager):
            schedule.step(x, target=y)
    for a, b in zip(ours.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)
    assert sum(r.ring.pending() for r in fxslots.regions()) == 0


@pytest.mark.parametrize("name, n", [("Schedule1F1B", 1), ("ScheduleInterleaved1F1B", 4),
                                     ("ScheduleZBVZeroBubble", 2)])
@pytest.mark.usefixtures("stand_in_graphs")
def test_under_the_cuda_graph_stand_in(name, n):
    # The graph executor's keys, staging and replays with one ring (and one staging buffer)
    # shared by a rank's chunks, and zero-bubble's backward run twice per microbatch.
    _skip_where_refused(name)
    ours, ref = [_block(i) for i in range(n)], [_block(i) for i in range(n)]
    schedule = _schedule(name, ours)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fp.compile_stages(schedule)
    _steps(schedule, 4)
    _steps(_schedule(name, ref), 4)
    assert fxslots.counters["captures"] > 0 and _StandInGraph.replays > 0
    for a, b in zip([p for m in ours for p in m.parameters()],
                    [p for m in ref for p in m.parameters()], strict=True):
        assert torch.equal(a.grad, b.grad)
    assert sum(r.ring.pending() for r in fxslots.regions()) == 0


@pytest.mark.parametrize("name, n", [c for c in SCHEDULES if c != ("Schedule1F1B", 1)])
def test_one_slot_fewer_runs_out(name, n):
    _skip_where_refused(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = fp.plan(_schedule(name, [_block(i) for i in range(n)]), share=False)
    tight = max(plan.slots, key=plan.slots.get)  # (one-stage 1F1B needs 1: nothing fewer)
    schedule = _compiled_by_hand(name, n, lambda s: {"slots": plan.slots[s] - (s == tight),
                                                     "arena_group": plan.group(s)})
    with pytest.raises(Exception) as info:
        _steps(schedule, 1)
    assert isinstance(_root(info.value), fxslots.SlotsExhaustedError)


def test_one_shared_slot_fewer_runs_out():
    plan = fp.plan(_schedule("ScheduleInterleaved1F1B", [_block(i) for i in range(4)]))
    assert plan.ranks[0].shared_slots == 4 and plan.slots == {0: 2, 1: 2, 2: 1, 3: 1}
    schedule = _compiled_by_hand("ScheduleInterleaved1F1B", 4,
                                 lambda s: {"slots": 3, "arena_group": "rank 0"})
    with pytest.raises(Exception) as info:
        _steps(schedule, 1)
    assert "a forward of arena group 'rank 0'" in str(_root(info.value))


@pytest.mark.parametrize("share", [False, True])
def test_measured_arena_bytes_are_the_plans(share):
    # Four chunks of one shape on one rank: one ring per chunk holds 2+2+1+1 frames; the
    # coloured ring holds the 4 that are ever live at once.
    schedule = _schedule("ScheduleInterleaved1F1B", [_block(i) for i in range(4)])
    plan = fp.compile_stages(schedule, fp.plan(schedule, share=share))
    _steps(schedule, 1)
    measured = fp.arena_bytes()
    frame = max(s.nbytes for r in fxslots.regions() for s in r.ring.slots)
    [bytes_] = plan.report({s: frame for s in range(4)})
    assert (bytes_.per_chunk, bytes_.coloured) == (6 * frame, 4 * frame)
    assert sum(measured.values()) == bytes_.planned == (4 if share else 6) * frame
    assert len(measured) == (1 if share else 4)


def test_too_few_slots_is_an_error_at_setup():
    schedule = _schedule("ScheduleGPipe", [_block(0)])
    with pytest.raises(fxslots.OptionsError, match=r"ScheduleGPipe #\d+ keeps up to 4 "
                       r"microbatches of stage 0 .* option 'slots' is 3; set 'slots' to at "
                       r"least 4"):
        fp.compile_stages(schedule, slots=3)


def test_one_arena_group_needs_one_slot_count():
    schedule = _compiled_by_hand("ScheduleInterleaved1F1B", 2,
                                 lambda s: {"slots": 2 + s, "arena_group": "g"})
    with pytest.raises(Exception) as info:
        _steps(schedule, 1)
    assert isinstance(_root(info.value), fxslots.OptionsError), repr(info.value)
    assert "regions of arena_group 'g' share one slot ring, so they need one option " \
           "'slots': this one has 3, the group 2" in str(_root(info.value))


def test_a_schedule_without_action_lists_is_refused():
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle

    class Custom(PipelineScheduleSingle):
        def _step_microbatches(self, *args, **kwargs):
            raise AssertionError("not run")

    stage = pipelining.PipelineStage(_block(0), 0, 1, torch.device("cpu"))
    with pytest.raises(fxslots.OptionsError, match="Custom exposes no per-rank action lists"):
        fp.slots_for(Custom(stage, n_microbatches=2))


@pytest.mark.parametrize("value, message", [
    ("", "'arena_group' must be a non-empty name or None"),
    (3, "'arena_group' must be str or None, got int 3"),
])
def test_arena_group_option_is_checked(value, message):
    with pytest.raises(fxslots.OptionsError, match=message):
        fxslots.Options.parse({"arena_group": value})


@pytest.mark.parametrize("how", ["grad", "backward_inputs"])
def test_input_gradients_leave_grad_buffers_alone(how):
    # Zero-bubble's I and W steps are autograd.grad calls once .grad buffers exist: a backward
    # that adds into .grad itself (grad_accumulation="graph") must do so only when autograd
    # would have accumulated there.
    ours, ref = _block(0), _block(0)
    f = torch.compile(ours, backend="fxslots", options={"slots": 2})
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(0))
    for m in (f, ref):
        m(x).sum().backward()  # creates the .grad buffers
    for _ in range(2):  # the first compiles the backward of an input that requires grad
        xi = x.clone().requires_grad_()
        if how == "grad":
            (gx,) = torch.autograd.grad(f(xi).sum(), xi)
        else:
            f(xi).sum().backward(inputs=[xi])
            gx = xi.grad
        xr = x.clone().requires_grad_()
        (gr,) = torch.autograd.grad(ref(xr).sum(), xr)
        assert torch.equal(gx, gr)
        for a, b in zip(ours.parameters(), ref.parameters(), strict=True):
            assert torch.equal(a.grad, b.grad)


@pytest.mark.parametrize("share", [True, False], ids=["coloured", "per-chunk"])
@pytest.mark.usefixtures("stand_in_graphs")
def test_a_steady_pipeline_captures_nothing(share):
    """A rank's chunks are one compiled graph with four parameter sets; sharing one ring, they
    meet in the same slots. Each (slot, parameter set) has its own captures: once all have run,
    a step captures nothing (before the key named the parameters, every step of the coloured
    interleaved schedule captured 32 graphs again, each replacing another chunk's)."""
    ours, ref = [_block(i) for i in range(4)], [_block(i) for i in range(4)]
    schedule = _schedule("ScheduleInterleaved1F1B", ours, n_microbatches=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fp.compile_stages(schedule, fp.plan(schedule, share=share))
    _steps(schedule, 2)
    captures = fxslots.counters["captures"]
    _steps(schedule, 3)
    assert fxslots.counters["captures"] == captures
    _steps(_schedule("ScheduleInterleaved1F1B", ref, n_microbatches=8), 5)
    for a, b in zip([p for m in ours for p in m.parameters()],
                    [p for m in ref for p in m.parameters()], strict=True):
        assert torch.equal(a.grad, b.grad)


@pytest.mark.usefixtures("stand_in_graphs")
def test_chunks_sharing_a_graph_deliver_into_buffers_of_their_own():
    """With ``zero_grad(set_to_none=True)`` each step, every chunk's first backward delivers its
    gradients (passes/deliver.py) into the buffer of its own parameter set: none finds another
    chunk's gradients in its way (which would stop delivery), and the gradients are eager's."""
    skip_stages_sharing_a_rank(4)
    ours, ref = [_block(i) for i in range(4)], [_block(i) for i in range(4)]
    schedule = _schedule("ScheduleInterleaved1F1B", ours, n_microbatches=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fp.compile_stages(schedule, fp.plan(schedule, share=True))
    eager = _schedule("ScheduleInterleaved1F1B", ref, n_microbatches=8)
    g = torch.Generator().manual_seed(0)
    for _ in range(4):
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)
        schedule.step(x, target=y)
        eager.step(x, target=y)
        for a, b in zip([p for m in ours for p in m.parameters()],
                        [p for m in ref for p in m.parameters()], strict=True):
            assert torch.equal(a.grad, b.grad)
        for m in (*ours, *ref):
            m.zero_grad(set_to_none=True)
    buffers = [b for r in fxslots.regions() for b in r.outputs.values()]
    assert len(buffers) == 4
    assert all(b.held == 0 and b.tensor is not None for b in buffers), [b.held for b in buffers]
