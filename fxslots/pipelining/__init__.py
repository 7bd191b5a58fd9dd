"""fxslots under ``torch.distributed.pipelining``: slot counts and arena groups read from a
schedule object, and its stages compiled with them. The analysis itself is pure data
(``fxslots.pipelining.actions``).

    schedule = ScheduleInterleaved1F1B(stages, n_microbatches=8, loss_fn=loss)
    plan = fxslots.pipelining.compile_stages(schedule)   # torch.compile each local stage
    schedule.step(x, target=y)
"""

from __future__ import annotations

import logging
import warnings
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from .. import _torch, state
from ..errors import OptionsError
from .actions import (
    ArenaBytes,
    PipelinePlan,
    RankPlan,
    Step,
    gpipe_steps,
    one_f_one_b_steps,
    plan_actions,
)

log = logging.getLogger(__name__)

__all__ = ["ArenaBytes", "PipelinePlan", "RankPlan", "Step", "arena_bytes", "compile_stages",
           "plan", "plan_actions", "slots_for"]


def _order(schedule: Any) -> Mapping[int, Iterable[Any]] | None:
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


def plan(schedule: Any, share: bool = True,
         frame_bytes: Mapping[int, int] | None = None) -> PipelinePlan:
    """The plan of a ``torch.distributed.pipelining`` schedule object, from the per-rank action
    lists it runs (every rank builds the whole order)."""
    name = type(schedule).__name__
    order = _order(schedule)
    if not order:
        raise OptionsError(
            f"fxslots: {name} exposes no per-rank action lists (its 'pipeline_order' is "
            f"{order!r}), so fxslots cannot count the microbatches it keeps in flight; set "
            f"the fxslots option 'slots' by hand to that count")
    # Group names must not meet those of another pipeline compiled in this process.
    state.counters["pipeline_plans"] += 1
    result = plan_actions(f"{name} #{state.counters['pipeline_plans']}", order, share,
                          frame_bytes)
    if any(r.split_backward for r in result.ranks.values()):
        warnings.warn(
            f"fxslots: {name} splits backward into input gradients (I) and weight gradients "
            f"(W). A compiled stage is one autograd node with one backward graph, so in every "
            f"stage but the first (where torch skips I) I and W each run all of it: twice "
            f"the backward work. Each slot is held until the W step. Schedule1F1B or "
            f"ScheduleInterleaved1F1B avoid the extra work",
            stacklevel=2)
    return result


def slots_for(schedule: Any) -> dict[int, int]:
    """Stage index -> the most microbatches whose forward waits for its backward."""
    return plan(schedule).slots


def compile_stages(schedule: Any, pipeline_plan: PipelinePlan | None = None, *,
                   dynamic: bool | None = None, fullgraph: bool = True,
                   **options: Any) -> PipelinePlan:
    """``torch.compile`` every stage this rank runs in ``schedule`` with fxslots, with the slots
    and arena group the plan gives it, then ``options``. Compiling after the schedule is built
    also passes the zero-bubble schedules' refusal of compiled stages, which guards against
    AOTAutograd's donated buffers: fxslots compiles none (its saved tensors live in slots).
    ``fullgraph=True`` by default: the plan counts one graph per stage."""
    import torch

    pipeline_plan = pipeline_plan or plan(schedule)
    split = any(r.split_backward for r in pipeline_plan.ranks.values())
    hazard = _torch.split_backward_hazard() if split else None
    if hazard:
        raise OptionsError(
            f"fxslots.pipelining.compile_stages: {type(schedule).__name__} splits backward "
            f"into input and weight gradients, and {hazard}; use Schedule1F1B or "
            f"ScheduleInterleaved1F1B, or torch 2.13 or later")
    for stage in _torch.schedule_stages(schedule):
        opts = pipeline_plan.options(stage.stage_index, **options)
        stage.submod = torch.compile(stage.submod, backend="fxslots", options=opts,
                                     dynamic=dynamic, fullgraph=fullgraph)
        log.info("stage %d of %s compiled with fxslots options %s", stage.stage_index,
                 pipeline_plan.schedule, opts)
    _evaluate_without_grad(schedule)
    return pipeline_plan


def _evaluate_without_grad(schedule: Any) -> None:
    """``schedule.eval`` runs every microbatch's forward with grad enabled and no backward:
    each would hold its slot (the plan counts the training loop's, one for 1F1B) for as long
    as the stage keeps its output, and the second found none, then the next ``step`` too.
    Evaluation reads no gradient, so it runs under ``torch.no_grad()``, which holds no slot."""
    import functools

    import torch

    run = getattr(schedule, "eval", None)
    if run is None or getattr(run, "fxslots_no_grad", False):
        return

    @functools.wraps(run)
    def evaluate(*args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return run(*args, **kwargs)
    evaluate.fxslots_no_grad = True  # type: ignore[attr-defined]
    schedule.eval = evaluate


def arena_bytes() -> dict[str, int]:
    """Bytes of every live slot arena, by ring (a ring shared by an arena group counted
    once): what the plan's ``report`` predicts, measured."""
    rings = {id(r.ring): r.ring for r in state.regions.values()}
    out: dict[str, int] = defaultdict(int)
    for ring in rings.values():
        out[ring.name] += sum(s.nbytes for s in ring.slots)
    return dict(out)
