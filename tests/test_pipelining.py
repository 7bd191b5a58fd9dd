"""fxslots under real schedules from torch.distributed.pipelining (one process, gloo, CPU)."""

from __future__ import annotations


import pytest
import torch
import torch.distributed as dist

import fxslots
from tests.helpers import skip_stages_sharing_a_rank

pipelining = pytest.importorskip("torch.distributed.pipelining")


@pytest.fixture
def process_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _block(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16))


def _loss(out, target):
    return torch.nn.functional.mse_loss(out, target)


def _run(schedule_cls, modules, n_microbatches, x, y):
    skip_stages_sharing_a_rank(len(modules))
    cpu = torch.device("cpu")
    stages = [pipelining.PipelineStage(m, stage_index=i, num_stages=len(modules), device=cpu)
              for i, m in enumerate(modules)]
    schedule = schedule_cls(stages if len(stages) > 1 else stages[0],
                            n_microbatches=n_microbatches, loss_fn=_loss)
    for _ in range(2):  # two steps: gradients accumulate in persistent .grad buffers
        schedule.step(x, target=y)


@pytest.mark.parametrize("schedule", ["ScheduleGPipe", "Schedule1F1B"])
def test_single_stage_schedules_match_eager_bitwise(process_group, schedule):
    cls = getattr(pipelining, schedule)
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    ours, ref = _block(0), _block(0)
    _run(cls, [torch.compile(ours, backend="fxslots", options={"slots": 4})], 4, x, y)
    _run(cls, [ref], 4, x, y)
    for a, b in zip(ours.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)


def test_interleaved_schedule_with_two_stages_on_one_rank(process_group):
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    ours, ref = [_block(0), _block(1)], [_block(0), _block(1)]
    compiled = [torch.compile(m, backend="fxslots", options={"slots": 4}) for m in ours]
    _run(pipelining.ScheduleInterleaved1F1B, compiled, 4, x, y)
    _run(pipelining.ScheduleInterleaved1F1B, ref, 4, x, y)
    for a, b in zip([p for m in ours for p in m.parameters()],
                    [p for m in ref for p in m.parameters()], strict=True):
        assert torch.equal(a.grad, b.grad)


def test_gpipe_with_too_few_slots_names_the_option(process_group):
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    compiled = torch.compile(_block(0), backend="fxslots", options={"slots": 3})
    with pytest.raises(Exception) as info:
        _run(pipelining.ScheduleGPipe, [compiled], 4, x, y)
    # The schedule wraps the stage's error; ours is its cause, and names the fix.
    error = info.value
    while not isinstance(error, fxslots.SlotsExhaustedError) and error.__cause__ is not None:
        error = error.__cause__
    assert isinstance(error, fxslots.SlotsExhaustedError)
    assert "raise the option 'slots' (now 3)" in str(error)
    fxslots.reset()
