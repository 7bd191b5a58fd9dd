"""fxslots.pipelining.actions: slots and arena groups from hand-built per-rank action lists."""

from __future__ import annotations

import re
from typing import NamedTuple

import pytest

from fxslots.errors import OptionsError
from fxslots.pipelining.actions import (
    Frame,
    Step,
    frames_of,
    gpipe_steps,
    one_f_one_b_steps,
    plan_actions,
    plan_rank,
    steps_of,
)


class Action(NamedTuple):
    """The fields fxslots reads from torch's schedule actions, and nothing else."""

    stage_index: int
    computation_type: str
    microbatch_index: int | None = None
    sub_actions: tuple | None = None


def steps(text: str) -> list[Step]:
    """'0F0 2B1 ...' (torch's own notation: stage, kind, microbatch) as steps."""
    return [Step(int(s), k, int(m)) for s, k, m in re.findall(r"(\d+)([FBIW])(\d+)", text)]


# ScheduleInterleaved1F1B, 2 ranks x 2 chunks (stages 0..3), 8 microbatches: the compute actions
# of torch 2.13's pipeline_order.
INTERLEAVED = {
    0: "0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 0F4 2B2 0F5 2B3 2F4 0B2 2F5 0B3 "
       "0F6 2B4 0F7 2B5 2F6 0B4 2F7 0B5 2B6 2B7 0B6 0B7",
    1: "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1F4 1B2 1F5 1B3 3F4 3B4 "
       "3F5 3B5 1F6 1B4 1F7 1B5 3F6 3B6 3F7 3B7 1B6 1B7",
}


def test_steps_keep_compute_actions_in_order_and_inline_overlapped_ones_forward_first():
    actions = [None, Action(0, "UNSHARD"), Action(0, "F", 0), Action(0, "SEND_F", 0),
               Action(-1, "OVERLAP_F_B", None, (Action(1, "B", 0), Action(0, "F", 1))),
               Action(1, "W", 0), Action(0, "REDUCE_GRAD")]
    assert steps_of(actions) == [Step(0, "F", 0), Step(0, "F", 1), Step(1, "B", 0),
                                 Step(1, "W", 0)]


def test_a_frame_lasts_until_the_last_of_its_backward_steps():
    assert frames_of(steps("0F0 0I0 0F1 0W0 0B1")) == [Frame(0, 0, 0, 3), Frame(0, 1, 2, 4)]
    # Zero-bubble: the slot is held until W, so W after the next forward means two in flight.
    assert plan_rank(0, steps("0F0 0I0 0F1 0W0 0I1 0W1")).slots == {0: 2}
    assert plan_rank(0, steps("0F0 0I0 0W0 0F1 0I1 0W1")).slots == {0: 1}
    assert plan_rank(0, steps("0F0 0I0 0W0")).split_backward


def test_a_forward_without_backward_holds_its_frame_to_the_end():
    assert frames_of(steps("0F0 0F1 0B1")) == [Frame(0, 0, 0, 3), Frame(0, 1, 1, 2)]


@pytest.mark.parametrize("text, message", [
    ("0B0 0F0", "runs a backward (B) of microbatch 0 at step 0 before its forward"),
    ("0F0 0F0", "runs microbatch 0 forward twice"),
])
def test_malformed_action_lists_are_refused(text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        frames_of(steps(text))


def test_gpipe_and_1f1b_keep_the_microbatches_their_loops_keep_in_flight():
    assert plan_rank(0, gpipe_steps(8, 0)).slots == {0: 8}
    assert " ".join(f"{s.stage}{s.kind}{s.microbatch}" for s in one_f_one_b_steps(4, 2, 0)) == \
        "0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3"
    assert [plan_rank(r, one_f_one_b_steps(8, 4, r)).slots[r] for r in range(4)] == [4, 3, 2, 1]
    assert plan_rank(0, one_f_one_b_steps(2, 4, 0)).slots == {0: 2}  # fewer microbatches


def test_interleaved_chunks_of_a_rank_share_the_slots_their_liveness_allows():
    plan = plan_actions("Interleaved", {r: steps(t) for r, t in INTERLEAVED.items()})
    assert plan.slots == {0: 4, 1: 3, 2: 2, 3: 1}
    assert [(r.shared_slots, r.shares) for r in plan.ranks.values()] == [(5, True), (3, True)]
    assert plan.options(0) == plan.options(2) == {"slots": 5, "arena_group": "Interleaved rank 0"}
    assert plan.options(3, offload="all") == {"slots": 3, "arena_group": "Interleaved rank 1",
                                               "offload": "all"}
    report = plan.report({0: 100, 1: 100, 2: 100, 3: 100})
    assert [(b.per_chunk, b.coloured, b.planned) for b in report] == [(600, 500, 500),
                                                                      (400, 300, 300)]


def test_without_sharing_every_stage_has_a_group_of_its_own():
    # Dynamo reuses one compiled graph for modules of one class compiled with equal settings:
    # two stages with equal options would land in one region, one ring. Distinct groups
    # keep their rings apart.
    plan = plan_actions("Interleaved", {r: steps(t) for r, t in INTERLEAVED.items()}, share=False)
    assert [plan.options(s) for s in (0, 2)] == [
        {"slots": 4, "arena_group": "Interleaved stage 0"},
        {"slots": 2, "arena_group": "Interleaved stage 2"}]
    assert [b.planned for b in plan.report({0: 10, 1: 10, 2: 10, 3: 10})] == [60, 40]


def test_frames_of_unequal_size_share_only_where_it_saves_bytes():
    # A shared ring sizes every slot for the rank's largest frame.
    order = {r: steps(t) for r, t in INTERLEAVED.items()}
    sizes = {0: 100, 1: 100, 2: 300, 3: 100}
    plan = plan_actions("Interleaved", order, frame_bytes=sizes)
    assert [(b.per_chunk, b.coloured, b.shared) for b in plan.report(sizes)] == [
        (1000, 1500, False), (400, 300, True)]
    assert plan.options(0)["slots"] == 4 and plan.options(1)["slots"] == 3


def test_a_rank_whose_stages_peak_together_keeps_a_ring_per_stage():
    plan = plan_actions("LoopedBFS", {0: steps("0F0 0F1 1F0 1F1 1B1 1B0 0B1 0B0")})
    assert plan.ranks[0].shared_slots == 4 and not plan.ranks[0].shares
    assert plan.options(1) == {"slots": 2, "arena_group": "LoopedBFS stage 1"}


def test_too_few_slots_for_the_schedule_is_an_error_at_setup():
    plan = plan_actions("Schedule1F1B", {r: one_f_one_b_steps(8, 2, r) for r in range(2)})
    with pytest.raises(OptionsError) as info:
        plan.options(0, slots=1)
    assert str(info.value) == (
        "fxslots: Schedule1F1B keeps up to 2 microbatches of stage 0 waiting for their "
        "backward, but its fxslots option 'slots' is 1; set 'slots' to at least 2, or pass "
        "fxslots.pipelining.plan(schedule).options(0)")
    plan.check(1, 1)
    with pytest.raises(OptionsError, match="runs no stage 5; its stages are"):
        plan.options(5)


def test_a_stage_on_two_ranks_is_refused():
    with pytest.raises(ValueError, match="a stage runs on several ranks"):
        plan_actions("Odd", {0: steps("0F0 0B0"), 1: steps("0F1 0B1")})
