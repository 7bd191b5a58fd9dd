"""Slots from a pipeline schedule, as pure data over its per-rank action lists.

A schedule lists, per rank, its compute actions: F (forward), B (full backward), or, in
zero-bubble schedules, I (input gradients) and W (weight gradients) of a (stage, microbatch).
A microbatch's saved tensors in a stage, its *frame*, live from its F until the last of its
backward actions: fxslots releases a slot at a backward that does not retain the graph, and
torch runs I with ``retain_graph=True`` and W without. Tests build action lists by hand.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import OptionsError

FORWARD, BACKWARD, INPUT_GRAD, WEIGHT_GRAD = "F", "B", "I", "W"
_COMPUTE = (FORWARD, BACKWARD, INPUT_GRAD, WEIGHT_GRAD)


@dataclass(frozen=True)
class Step:
    """One compute action of a rank, in the order the rank runs it."""

    stage: int
    kind: str  # F, B, I or W
    microbatch: int


@dataclass(frozen=True)
class Frame:
    """One microbatch's saved tensors in one stage: held from step ``start`` (its F) through
    step ``end`` (the last of its backward steps)."""

    stage: int
    microbatch: int
    start: int
    end: int


def steps_of(actions: Iterable[Any]) -> list[Step]:
    """The compute steps of one rank's action list: idle steps (None), communication,
    UNSHARD/RESHARD and REDUCE_GRAD dropped; an OVERLAP_F_B's sub-actions in line, forwards
    first (the conservative order: both frames are counted live at once)."""
    out: list[Step] = []
    for a in actions:
        if a is None:
            continue
        if isinstance(a, Step):
            out.append(a)
            continue
        subs = getattr(a, "sub_actions", None)
        if subs:
            out += sorted(steps_of(subs), key=lambda s: s.kind != FORWARD)
            continue
        kind = _kind(a)
        if kind in _COMPUTE:
            out.append(Step(a.stage_index, kind, a.microbatch_index))
    return out


def _kind(action: Any) -> str:
    t = action.computation_type
    return getattr(t, "value", t)  # torch's enum is a str Enum; hand-built lists may use str


def frames_of(steps: Sequence[Step]) -> list[Frame]:
    """Every frame of one rank. A backward step with no forward before it is an error (the
    action list is malformed); a forward with no backward holds its frame to the end."""
    start: dict[tuple[int, int], int] = {}
    end: dict[tuple[int, int], int] = {}
    for i, s in enumerate(steps):
        key = (s.stage, s.microbatch)
        if s.kind == FORWARD:
            if key in start:
                raise ValueError(f"stage {s.stage} runs microbatch {s.microbatch} forward twice "
                                 f"(steps {start[key]} and {i})")
            start[key] = i
        elif key not in start:
            raise ValueError(f"stage {s.stage} runs a backward ({s.kind}) of microbatch "
                             f"{s.microbatch} at step {i} before its forward")
        else:
            end[key] = i
    return [Frame(st, mb, i, end.get((st, mb), len(steps))) for (st, mb), i in start.items()]


def live_at_forwards(frames: Sequence[Frame], stages: Iterable[int]) -> int:
    """The most frames of ``stages`` held at once. Counted at each forward (where a frame
    takes its slot), the frame itself included; a backward frees its slot once it is done."""
    wanted = set(stages)
    chosen = [f for f in frames if f.stage in wanted]
    return max((sum(g.start <= f.start <= g.end for g in chosen) for f in chosen), default=0)


@dataclass(frozen=True)
class RankPlan:
    """What one rank keeps in flight: per stage on its own, and all its stages together."""

    rank: int
    slots: dict[int, int]  # stage -> most frames of that stage at once
    shared_slots: int  # most frames of all this rank's stages at once
    split_backward: bool  # I and W steps: zero-bubble

    @property
    def stages(self) -> tuple[int, ...]:
        return tuple(sorted(self.slots))

    @property
    def shares(self) -> bool:
        """One ring for the rank's stages saves slots only when their peaks differ in time."""
        return len(self.slots) > 1 and self.shared_slots < sum(self.slots.values())


def plan_rank(rank: int, actions: Iterable[Any]) -> RankPlan:
    steps = steps_of(actions)
    frames = frames_of(steps)
    stages = sorted({f.stage for f in frames})
    return RankPlan(rank, {s: live_at_forwards(frames, [s]) for s in stages},
                    live_at_forwards(frames, stages),
                    any(s.kind in (INPUT_GRAD, WEIGHT_GRAD) for s in steps))


@dataclass(frozen=True)
class ArenaBytes:
    """Slot arena bytes of one rank: one arena set per chunk against one coloured set."""

    rank: int
    per_chunk: int  # sum over its stages of (that stage's slots x its largest frame)
    coloured: int  # the rank's shared slots x the largest frame of any of its stages
    shared: bool  # whether the plan gives this rank one arena group

    @property
    def planned(self) -> int:
        """What the plan's options cost."""
        return self.coloured if self.shared else self.per_chunk


@dataclass(frozen=True)
class PipelinePlan:
    """Slots per stage and arena groups per rank for one schedule; ``options(stage)`` is ready
    to pass to ``torch.compile(..., backend="fxslots", options=...)``."""

    schedule: str
    ranks: dict[int, RankPlan]
    share: bool = True  # give a rank whose stages peak at different times one arena group
    frame_bytes: Mapping[int, int] | None = None
    """Each stage's largest frame, where known (a previous run's ``fxslots.pipelining.
    arena_bytes``): a shared ring sizes every slot for the largest frame of the rank, so with
    frames of unequal size sharing can cost more than it saves; then the rank does not share."""

    @property
    def slots(self) -> dict[int, int]:
        """Stage -> the most microbatches whose forward waits for its backward."""
        return {s: k for r in self.ranks.values() for s, k in r.slots.items()}

    def rank_of(self, stage: int) -> RankPlan:
        for r in self.ranks.values():
            if stage in r.slots:
                return r
        raise OptionsError(f"fxslots: {self.schedule} runs no stage {stage}; its stages are "
                           f"{sorted(self.slots)}")

    def shared(self, stage: int) -> bool:
        """Whether ``stage`` shares one ring with the other stages of its rank."""
        r = self.rank_of(stage)
        if not (self.share and r.shares):
            return False
        return self.frame_bytes is None or _coloured(r, self.frame_bytes) < _per_chunk(
            r, self.frame_bytes)

    def group(self, stage: int) -> str:
        """The arena group of ``stage``: its rank's, or its own. Never none: Dynamo reuses
        one compiled graph (so one region, one ring) for modules of one class compiled with
        equal settings, which would put two stages with their own slot counts in one ring."""
        r = self.rank_of(stage)
        return f"{self.schedule} rank {r.rank}" if self.shared(stage) else \
            f"{self.schedule} stage {stage}"

    def needed(self, stage: int, shared: bool | None = None) -> int:
        """Slots ``stage`` needs: its rank's together where it shares their ring (``shared``:
        as a stage was compiled, else as this plan would share it)."""
        r = self.rank_of(stage)
        if shared is None:
            shared = self.shared(stage)
        return r.shared_slots if shared else r.slots[stage]

    def options(self, stage: int, **extra: Any) -> dict[str, Any]:
        """fxslots options for ``stage``: its slots and arena group, then ``extra``. A 'slots'
        in ``extra`` below what the schedule keeps in flight is an error now, not mid-step.
        They assume the stage compiles to one graph (``fullgraph=True``): each graph of a
        stage split by graph breaks would take a slot of the group per microbatch."""
        out: dict[str, Any] = {"slots": self.needed(stage), "arena_group": self.group(stage)}
        out.update(extra)
        self.check(stage, out["slots"])
        return out

    def check(self, stage: int, slots: int) -> None:
        needed = self.needed(stage)
        if slots < needed:
            shared = (f" (its rank's stages {list(self.rank_of(stage).stages)} share one arena "
                      f"group)" if self.shared(stage) else "")
            raise OptionsError(
                f"fxslots: {self.schedule} keeps up to {needed} microbatches of stage {stage} "
                f"waiting for their backward{shared}, but its fxslots option 'slots' is "
                f"{slots}; set 'slots' to at least {needed}, or pass "
                f"fxslots.pipelining.plan(schedule).options({stage})")

    def report(self, frame_bytes: Mapping[int, int]) -> list[ArenaBytes]:
        """Per rank whose stages all have their largest frame (arena bytes of one slot) in
        ``frame_bytes``: a process knows only its own rank's."""
        return [ArenaBytes(r.rank, _per_chunk(r, frame_bytes), _coloured(r, frame_bytes),
                           self.shared(r.stages[0])) for r in self.ranks.values()
                if set(r.stages) <= set(frame_bytes)]


def _per_chunk(r: RankPlan, frame_bytes: Mapping[int, int]) -> int:
    return sum(k * frame_bytes[s] for s, k in r.slots.items())


def _coloured(r: RankPlan, frame_bytes: Mapping[int, int]) -> int:
    return r.shared_slots * max(frame_bytes[s] for s in r.slots)


def plan_actions(schedule: str, order: Mapping[int, Iterable[Any]], share: bool = True,
                 frame_bytes: Mapping[int, int] | None = None) -> PipelinePlan:
    """The plan of a schedule named ``schedule`` from its per-rank action lists."""
    ranks = {rank: plan_rank(rank, actions) for rank, actions in sorted(order.items())}
    stages = [s for r in ranks.values() for s in r.slots]
    if len(stages) != len(set(stages)):
        raise ValueError(f"{schedule}: a stage runs on several ranks: "
                         f"{ {r.rank: list(r.stages) for r in ranks.values()} }")
    return PipelinePlan(schedule, ranks, share, frame_bytes)


def gpipe_steps(n_microbatches: int, stage: int) -> list[Step]:
    """What ScheduleGPipe's ``_step_microbatches`` runs: every forward, then every backward."""
    return ([Step(stage, FORWARD, m) for m in range(n_microbatches)]
            + [Step(stage, BACKWARD, m) for m in range(n_microbatches)])


def one_f_one_b_steps(n_microbatches: int, num_stages: int, stage: int) -> list[Step]:
    """What Schedule1F1B's ``_step_microbatches`` runs: ``num_stages - stage`` warm-up
    forwards, then backward and forward in turn, then the remaining backwards. (Its
    ``pipeline_order`` differs: the last rank's forwards there are numbered from 1.)"""
    warmup = min(n_microbatches, num_stages - stage)
    out = [Step(stage, FORWARD, m) for m in range(warmup)]
    for m in range(n_microbatches):
        out.append(Step(stage, BACKWARD, m))
        if warmup + m < n_microbatches:
            out.append(Step(stage, FORWARD, warmup + m))
    return out
