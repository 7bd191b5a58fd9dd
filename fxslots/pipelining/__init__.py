"""fxslots under ``torch.distributed.pipelining``: slot counts and arena groups read from a
schedule object, and its stages compiled with them. The analysis itself is pure data
(``fxslots.pipelining.actions``); reading schedule objects, and the hooks that keep every later
schedule over a compiled stage within its slots, are ``fxslots.pipelining.schedules``.

    schedule = ScheduleInterleaved1F1B(stages, n_microbatches=8, loss_fn=loss)
    plan = fxslots.pipelining.compile_stages(schedule)   # torch.compile each local stage
    schedule.step(x, target=y)
"""

from __future__ import annotations

import logging
import warnings
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from .. import _torch, state
from ..errors import OptionsError
from . import schedules
from .actions import ArenaBytes, PipelinePlan, RankPlan, Step, plan_actions

log = logging.getLogger(__name__)

__all__ = ["ArenaBytes", "PipelinePlan", "RankPlan", "Step", "arena_bytes", "compile_stages",
           "plan", "plan_actions", "slots_for"]


def plan(schedule: Any, share: bool = True,
         frame_bytes: Mapping[int, int] | None = None) -> PipelinePlan:
    """The plan of a ``torch.distributed.pipelining`` schedule object, from the per-rank action
    lists it runs (every rank builds the whole order)."""
    name = type(schedule).__name__
    order = schedules.order(schedule)
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
    ``fullgraph=True`` by default: the plan counts one graph per stage. Every schedule run over
    these compiled stages (later ones built on ``stage.submod`` too) evaluates under no_grad and
    checks at its first step that their slots cover it (``fxslots/pipelining/schedules.py``)."""
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
        schedules.mark(stage.submod, schedules.Compiled(
            pipeline_plan.schedule, opts["slots"], pipeline_plan.shared(stage.stage_index)))
        log.info("stage %d of %s compiled with fxslots options %s", stage.stage_index,
                 pipeline_plan.schedule, opts)
    schedules.install()
    return pipeline_plan


def arena_bytes() -> dict[str, int]:
    """Bytes of every live slot arena, by ring (a ring shared by an arena group counted
    once): what the plan's ``report`` predicts, measured."""
    rings = {id(r.ring): r.ring for r in state.regions.values()}
    out: dict[str, int] = defaultdict(int)
    for ring in rings.values():
        out[ring.name] += sum(s.nbytes for s in ring.slots)
    return dict(out)
