"""fxslots stages in a real pipeline schedule (torch.distributed.pipelining), one process.

Two stages of a small model live on this rank and run the interleaved 1F1B schedule over 4
microbatches; every stage is compiled with fxslots by ``fxslots.pipelining.compile_stages``,
which reads the slots from the schedule (here both stages share one ring of 2 slots: never more
than 2 of their frames are live at once). Gradients are checked against the same schedule on
eager stages. examples/pipeline_gpt.py runs 2 stages on 2 processes.

    python examples/pipeline.py
"""

from __future__ import annotations

import copy
import os
import sys
import tempfile

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, ScheduleInterleaved1F1B

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fxslots.pipelining


def block(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 16))


def run(stage_modules, x, y, compiled: bool) -> None:
    cpu = torch.device("cpu")
    stages = [PipelineStage(m, stage_index=i, num_stages=len(stage_modules), device=cpu)
              for i, m in enumerate(stage_modules)]
    schedule = ScheduleInterleaved1F1B(
        stages, n_microbatches=4, loss_fn=lambda out, t: torch.nn.functional.mse_loss(out, t))
    if compiled:
        plan = fxslots.pipelining.compile_stages(schedule)
        print(f"slots per stage on its own: {plan.slots}; "
              f"options: {[plan.options(s) for s in plan.slots]}")
    schedule.step(x, target=y)
    if compiled:
        print(f"slot arena bytes: {fxslots.pipelining.arena_bytes()}")


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        dist.init_process_group("gloo", init_method=f"file://{d}/pg", rank=0, world_size=1)
        try:
            eager = [block(0), block(1)]
            ours = copy.deepcopy(eager)
            x, y = torch.randn(8, 16), torch.randn(8, 16)
            run(ours, x, y, compiled=True)
            run(eager, x, y, compiled=False)
        finally:
            dist.destroy_process_group()
    same = all(torch.equal(a.grad, b.grad) for m, e in zip(ours, eager, strict=True)
               for a, b in zip(m.parameters(), e.parameters(), strict=True))
    print(f"interleaved 1F1B, 2 stages x 4 microbatches under fxslots: gradients "
          f"{'bitwise equal to' if same else 'DIFFER from'} eager stages")
    assert same


if __name__ == "__main__":
    main()
