"""What fxslots reads from ``torch.distributed.pipelining`` schedule objects, and the two hooks
it puts on their classes for every schedule run over a stage ``compile_stages`` compiled.

A compiled stage outlives the schedule it was compiled for: one schedule per sequence length
(``examples/pipeline_gpt.py``) builds each later ``PipelineStage`` on ``stage.submod``, which
fxslots never sees. So the hooks sit on the schedule classes and ask each schedule's stages:

- ``eval`` runs every forward with grad enabled and no backward, each holding its slot while
  the stage keeps its output: over a compiled stage it runs under ``torch.no_grad()``.
- ``step`` checks, before its first training step runs anything, that the slots the stage was
  compiled with cover what this schedule keeps in flight; else a mid-step
  ``SlotsExhaustedError`` would advise an option the user never set.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import _torch
from ..errors import OptionsError
from .actions import gpipe_steps, one_f_one_b_steps, plan_actions

# Attribute names: on a compiled module (its ``Compiled``), a wrapped method, a checked schedule.
_MARK, _HOOKED, _CHECKED = "fxslots_pipeline_stage", "fxslots_hooked", "fxslots_slots_checked"


@dataclass(frozen=True)
class Compiled:
    """What ``compile_stages`` compiled one stage with."""

    schedule: str  # the plan's name, e.g. "ScheduleGPipe #1"
    slots: int
    shared: bool  # one ring for all its rank's stages: their frames together count


def order(schedule: Any) -> Mapping[int, Iterable[Any]] | None:
    """Per rank, the actions ``schedule`` runs. The single-stage schedules run their own loop
    (rank r runs stage r); the others run their ``pipeline_order``."""
    from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe

    # Exactly these classes: a subclass may run another loop (its pipeline_order is read).
    if type(schedule) in (ScheduleGPipe, Schedule1F1B):
        n, stages = _torch.schedule_microbatches(schedule), _torch.schedule_stages(schedule)
        num = stages[0].num_stages
        if type(schedule) is ScheduleGPipe:
            return {r: gpipe_steps(n, r) for r in range(num)}
        return {r: one_f_one_b_steps(n, num, r) for r in range(num)}
    return getattr(schedule, "pipeline_order", None)


def mark(module: Any, compiled: Compiled) -> None:
    # On the compiled module: every later stage built on it shares it. Not setattr, which
    # OptimizedModule forwards to the eager module: a stage built on that would read as compiled.
    object.__setattr__(module, _MARK, compiled)


def _compiled(schedule: Any) -> dict[int, Compiled]:
    """Stage index -> how compile_stages compiled it, for this rank's stages it compiled."""
    return {s.stage_index: c for s in _torch.schedule_stages(schedule)
            if (c := getattr(s.submod, _MARK, None)) is not None}


def install() -> None:
    """Hook ``step`` and ``eval`` of torch's two schedule bases (every schedule class derives
    from one), once per process. They change nothing for a schedule of uncompiled stages."""
    from torch.distributed.pipelining.schedules import PipelineScheduleMulti, PipelineScheduleSingle

    for cls in (PipelineScheduleSingle, PipelineScheduleMulti):
        if not getattr(cls.step, _HOOKED, False):
            cls.step = _checking(cls.step)
        evaluate = getattr(cls, "eval", None)  # older releases have no eval
        if evaluate is not None and not getattr(evaluate, _HOOKED, False):
            cls.eval = _evaluating(evaluate)


def _evaluating(evaluate: Any) -> Any:
    import torch

    @functools.wraps(evaluate)
    def run(schedule: Any, *args: Any, **kwargs: Any) -> Any:
        if not _compiled(schedule):
            return evaluate(schedule, *args, **kwargs)
        with torch.no_grad():  # evaluation reads no gradient; a no_grad forward holds no slot
            return evaluate(schedule, *args, **kwargs)
    setattr(run, _HOOKED, True)
    return run


def _checking(step: Any) -> Any:
    import torch

    @functools.wraps(step)
    def run(schedule: Any, *args: Any, **kwargs: Any) -> Any:
        # Under no_grad (eval) no forward holds a slot; a failed check stays unchecked.
        if torch.is_grad_enabled() and not getattr(schedule, _CHECKED, False):
            check(schedule)
            setattr(schedule, _CHECKED, True)
        return step(schedule, *args, **kwargs)
    setattr(run, _HOOKED, True)
    return run


def check(schedule: Any) -> None:
    """Raise if a stage of ``schedule`` was compiled with fewer slots than ``schedule`` keeps
    in flight on it. A schedule without action lists is not counted (``plan`` refuses it)."""
    compiled = _compiled(schedule)
    actions = order(schedule) if compiled else None
    if not actions:
        return
    cls = type(schedule).__name__
    name = f"{cls} over {_torch.schedule_microbatches(schedule)} microbatches"
    try:
        needs = plan_actions(name, actions)
    except ValueError:  # lists that do not read as F before B: the runtime error stays
        return
    for stage, c in sorted(compiled.items()):
        need = needs.needed(stage, c.shared)
        if need > c.slots:
            shared = " (its rank's stages share one arena group)" if c.shared else ""
            raise OptionsError(
                f"fxslots: {cls}.step refused before it runs: {name} keeps up to {need} "
                f"microbatches of stage {stage} waiting for their backward{shared}, but "
                f"fxslots.pipelining.compile_stages compiled stage {stage} for {c.schedule} "
                f"with the fxslots option 'slots' {c.slots}; call compile_stages with the "
                f"schedule that keeps the most in flight (and build the others' stages on its "
                f"compiled stage.submod), or pass slots={need} to compile_stages")
