"""A small GPT split into 2 pipeline stages on 2 processes (gloo, CPU), trained with
torch.distributed.pipelining's Schedule1F1B over 4 microbatches at 2 sequence lengths, each
stage compiled with fxslots, its slots taken from the schedule. Losses and gradients are
checked bitwise against the same pipeline over eager stages.

    python examples/pipeline_gpt.py
"""

from __future__ import annotations

import copy
import os
import sys
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from examples.models import GPT
from examples.spawn import launch

N_MICROBATCHES = 4
BATCH = 8
SEQS = (16, 24, 16)  # one step each: two shape variants, the first seen again
VOCAB = 64


class FirstStage(nn.Module):
    """Token and position embeddings and the first half of the blocks."""

    def __init__(self, gpt: GPT):
        super().__init__()
        half = len(gpt.blocks) // 2
        self.tok, self.pos, self.blocks = gpt.tok, gpt.pos, gpt.blocks[:half]

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return x


class LastStage(nn.Module):
    """The second half of the blocks, the final norm and the head (untied: its own weight)."""

    def __init__(self, gpt: GPT):
        super().__init__()
        half = len(gpt.blocks) // 2
        self.blocks, self.ln = gpt.blocks[half:], gpt.ln
        self.head = nn.Linear(gpt.head.in_features, gpt.head.out_features, bias=False)
        self.head.weight = nn.Parameter(gpt.head.weight.detach().clone())

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def stage_module(rank: int) -> nn.Module:
    torch.manual_seed(0)  # every rank builds the same model and keeps its part
    gpt = GPT(vocab=VOCAB, d=32, heads=4, layers=2, max_len=64)
    return FirstStage(gpt) if rank == 0 else LastStage(gpt)


def loss_fn(logits, target):
    return nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten())


def batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randint(0, VOCAB, (BATCH, s), generator=g),
             torch.randint(0, VOCAB, (BATCH, s), generator=g)) for s in SEQS]


def train(module: nn.Module, rank: int, world: int, compiled: bool):
    """Three steps, one 1F1B schedule per sequence length (a stage infers its p2p buffer
    shapes once); gradients accumulate in .grad across steps. The first schedule compiles the
    stage with fxslots; the others run that compiled stage. Returns (losses, grads, plan)."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    import fxslots.pipelining

    losses, schedules, plan = [], {}, None
    for x, y in batches():
        seq = x.shape[1]
        if seq not in schedules:
            stage = PipelineStage(module, rank, world, torch.device("cpu"))
            schedules[seq] = Schedule1F1B(stage, n_microbatches=N_MICROBATCHES, loss_fn=loss_fn)
            if compiled and plan is None:
                plan = fxslots.pipelining.compile_stages(schedules[seq])
                module = stage.submod
        step_losses = [] if rank == world - 1 else None
        schedules[seq].step(*([x] if rank == 0 else []), target=y, losses=step_losses)
        losses.append(step_losses)
    return losses, [p.grad.clone() for p in module.parameters()], plan


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def worker(rank: int, world: int, port: int, out_dir: str) -> None:
    torch.set_num_threads(1)  # two ranks on a small machine
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=120))
    try:
        eager = stage_module(rank)
        ours = copy.deepcopy(eager)
        ref_losses, ref_grads, _ = train(eager, rank, world, compiled=False)
        losses, grads, plan = train(ours, rank, world, compiled=True)
        import fxslots

        torch.save({
            "losses_equal": _equal(losses, ref_losses),
            "grads_equal": [torch.equal(a, b) for a, b in zip(grads, ref_grads, strict=True)],
            "max_grad_diff": max((a - b).abs().max().item()
                                 for a, b in zip(grads, ref_grads, strict=True)),
            "slots": plan.slots,
            "pending": sum(r.ring.pending() for r in fxslots.regions()),
            "arena_bytes": fxslots.pipelining.arena_bytes(),
            "compiles": fxslots.counters["compiles"],
            # torch 2.11's PipelineStage infers its shapes by running the stage without grad
            "inference_graphs": fxslots.counters["inference_graphs"],
            "fxslots": fxslots.__file__,
        }, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def run(world: int = 2, timeout_s: float = 240) -> list[dict]:
    """Both pipelines on ``world`` spawned ranks; each rank's findings."""
    with tempfile.TemporaryDirectory() as d:
        launch(worker, world, d, timeout_s=timeout_s)
        return [torch.load(os.path.join(d, f"rank{r}.pt")) for r in range(world)]


def main() -> None:
    results = run()
    for rank, r in enumerate(results):
        print(f"rank {rank}: slots {r['slots']}, {r['compiles']} fxslots compiles, "
              f"{r['pending']} slots pending after the steps, losses "
              f"{'bitwise equal' if r['losses_equal'] else 'DIFFER'}, gradients "
              f"{'bitwise equal' if all(r['grads_equal']) else 'DIFFER'} "
              f"(max |diff| {r['max_grad_diff']:.3g})")
    assert all(r["losses_equal"] and all(r["grads_equal"]) for r in results)


if __name__ == "__main__":
    main()
