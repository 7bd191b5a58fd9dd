"""One rank of benchmarks/pipeline_gpu.py: its stages of the Llama model, one case, measured.

Runs in a process spawned by examples/spawn.launch; writes its row as JSON into the work
directory (the eager case also leaves its gradients there, for the other cases to compare).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from examples.llama import SIZES, Llama, LlamaConfig, batch

CHUNKS = {"1f1b": 1, "interleaved": 2}
MICROBATCHES, MB_BATCH = 8, 2


class LlamaStage(nn.Module):
    """Blocks ``lo:hi`` of a Llama, with the embedding on the first stage and the final norm
    and head on the last; the rotary tables on every stage."""

    def __init__(self, model: Llama, lo: int, hi: int, first: bool, last: bool):
        super().__init__()
        self.embed = model.embed if first else None
        self.blocks = nn.ModuleList(model.blocks[lo:hi])
        self.norm = model.norm if last else None
        self.head = model.head if last else None
        self.register_buffer("cos", model.cos.clone(), persistent=False)
        self.register_buffer("sin", model.sin.clone(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x)
        s = x.shape[1]
        cos, sin = self.cos[:s].to(x.dtype), self.sin[:s].to(x.dtype)
        for block in self.blocks:
            x = block(x, cos, sin)
        if self.head is not None:
            x = self.head(self.norm(x))
        return x


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def model_config(cfg: dict) -> LlamaConfig:
    base = SIZES[cfg["size"]]
    layers = cfg["layers"] or max(base.layers, 4)  # 4 chunks need 4 layers
    return LlamaConfig(**{**base.__dict__, "layers": layers})


def stage_modules(cfg: dict, sched: str, rank: int, world: int, device) -> dict[int, nn.Module]:
    """This rank's stages: stage ``rank + world * c`` for chunk c (torch's interleaved
    placement), the layers cut as evenly as they go."""
    mcfg = model_config(cfg)
    n = world * CHUNKS[sched]
    torch.manual_seed(0)  # every rank builds the same model and keeps its parts
    model = Llama(mcfg)
    cuts = [round(i * mcfg.layers / n) for i in range(n + 1)]
    mods = {}
    for s in range(rank, n, world):
        m = LlamaStage(model, cuts[s], cuts[s + 1], s == 0, s == n - 1)
        mods[s] = m.to(device=device, dtype=torch.bfloat16)
    return mods


def init(rank: int, world: int, port: int, cfg: dict) -> torch.device:
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // world))
    if cfg["device"] == "cuda":
        os.environ["NCCL_NVLS_ENABLE"] = "0"
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, timeout=timedelta(seconds=120),
                                device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, timeout=timedelta(seconds=120))
    return device


def worker(rank: int, world: int, port: int, cfg: dict, sched: str, case: str,
           work: str) -> None:
    """One case on this rank; its row lands in ``work`` even when the case fails."""
    device = init(rank, world, port, cfg)
    try:
        Case(rank, world, device, cfg, sched, case, work).measure()
    finally:
        dist.destroy_process_group()


class Case:
    """One case on one rank: build, compile, warm up, time, check gradients."""

    def __init__(self, rank, world, device, cfg, sched, case, work):
        self.rank, self.world, self.device = rank, world, device
        self.cfg, self.sched, self.case, self.work = cfg, sched, case, work
        self.cuda = device.type == "cuda"
        self.n_stages = world * CHUNKS[sched]
        self.plan = None
        mcfg = model_config(cfg)
        g = torch.Generator(device=device).manual_seed(1)
        self.data = {s: batch(mcfg, MICROBATCHES * MB_BATCH, s, device, g) for s in cfg["seqs"]}

    def build(self) -> None:
        import torch.distributed.pipelining as pp

        import fxslots.pipelining

        torch._dynamo.config.cache_size_limit = 64
        self.modules = stage_modules(self.cfg, self.sched, self.rank, self.world, self.device)
        self.params = [p for m in self.modules.values() for p in m.parameters()]
        run = dict(self.modules)
        if self.case == "reduce-overhead":
            run = {s: torch.compile(m, mode="reduce-overhead") for s, m in run.items()}
        self.schedules = {}
        for seq in self.cfg["seqs"]:  # a stage infers its p2p buffer shapes once: one each
            stages = [pp.PipelineStage(m, s, self.n_stages, self.device) for s, m in run.items()]
            cls = pp.Schedule1F1B if self.sched == "1f1b" else pp.ScheduleInterleaved1F1B
            self.schedules[seq] = cls(stages if len(stages) > 1 else stages[0],
                                      n_microbatches=MICROBATCHES, loss_fn=loss_fn)
            if self.case.startswith("fxslots") and self.plan is None:
                share = self.case == "fxslots"
                self.plan = fxslots.pipelining.compile_stages(
                    self.schedules[seq], fxslots.pipelining.plan(self.schedules[seq], share))
                run = {st.stage_index: st.submod for st in stages}  # later schedules: the same

    def step(self, seq: int) -> None:
        if self.case == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()
        tokens, targets = self.data[seq]
        args = [tokens] if 0 in self.modules else []
        self.schedules[seq].step(*args, target=targets)

    def rep(self) -> float:
        """Both sequence lengths, one step each, from zeroed gradients; seconds."""
        for p in self.params:
            p.grad = None
        self.sync()
        t0 = time.perf_counter()
        for seq in self.cfg["seqs"]:
            self.step(seq)
        self.sync()
        return time.perf_counter() - t0

    def warm_up(self) -> int:
        """The untimed repetitions: at least ``warmup``, then until one captures nothing (a
        ring whose slot count does not divide a step's forwards meets a new (slot, chunk,
        shape) for several steps), at most 5 more; how many ran. Both ranks stop together."""
        n = 0
        while True:
            before = _fxslots_counters()["captures"]
            self.rep()
            n += 1
            quiet = torch.tensor([int(_fxslots_counters()["captures"] == before)],
                                 device=self.device)
            dist.all_reduce(quiet, op=dist.ReduceOp.MIN)
            if n >= self.cfg["warmup"] and (quiet.item() or n >= self.cfg["warmup"] + 5):
                return n

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)
        dist.barrier()

    def measure(self) -> dict:
        row = {"schedule": self.sched, "case": self.case, "rank": self.rank,
               "torch": torch.__version__, "device": str(self.device), "stages": None,
               "error": None}
        try:
            self.build()
            row["stages"] = sorted(self.modules)
            self.memory_start(row)
            t0 = time.perf_counter()
            row["warm_reps"] = self.warm_up()
            row["warm_s"] = time.perf_counter() - t0
            before = _fxslots_counters()
            times = [self.rep() / len(self.cfg["seqs"]) * 1e3 for _ in range(self.cfg["reps"])]
            # A capture in the timed steps costs milliseconds: the steady state should have none.
            row.update({f"{k}_timed": v - before[k] for k, v in _fxslots_counters().items()})
            row.update(ms_per_step=statistics.median(times), ms_min=min(times),
                       ms_max=max(times), ms_all=times)
            self.memory_end(row)
            self.rep()  # from zeroed gradients: what the eager case compares against
            row["max_grad_err"] = self.grad_error()
            if self.plan is not None:
                self.fxslots_figures(row)
            if self.case == "reduce-overhead":
                from torch._dynamo.utils import counters

                row["cudagraph_skips"] = sum(counters["inductor"].get(k, 0) for k in (
                    "cudagraph_skips",))
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {_root_line(e)}"
            raise
        finally:
            with open(os.path.join(self.work, f"{self.sched}-{self.case}-rank{self.rank}.json"),
                      "w") as fh:
                json.dump(row, fh)
        return row

    def memory_start(self, row: dict) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            row["params_gib"] = torch.cuda.memory_allocated(self.device) / 2**30
            torch.cuda.reset_peak_memory_stats(self.device)

    def memory_end(self, row: dict) -> None:
        if self.cuda:
            row["peak_alloc_gib"] = torch.cuda.max_memory_allocated(self.device) / 2**30
            row["reserved_gib"] = torch.cuda.max_memory_reserved(self.device) / 2**30

    def grad_error(self) -> float | None:
        """The largest |grad - eager grad| over a parameter, relative to its largest eager
        |grad|: gradients of one repetition from zero, the eager case's saved alongside."""
        path = os.path.join(self.work, f"{self.sched}-grads-rank{self.rank}.pt")
        grads = [p.grad.detach().float().cpu() for p in self.params]
        if self.case == "eager":
            torch.save(grads, path)
            return 0.0
        if not os.path.exists(path):
            return None
        err = 0.0
        for g, ref in zip(grads, torch.load(path), strict=True):
            scale = ref.abs().max().item() or 1.0
            err = max(err, (g - ref).abs().max().item() / scale)
        return err

    def fxslots_figures(self, row: dict) -> None:
        """Slot arenas against the schedule: in-flight slots x the largest frame (what a slot
        holds: saved tensors, staged inputs, alignment) and x the largest saved bytes."""
        import fxslots
        import fxslots.pipelining as fp
        from fxslots.schemas import evaluate

        frame, saved, rings = {}, {}, {}
        for region in fxslots.regions():
            ring = region.ring
            rings[ring.name] = ring
            for v in region.live_variants():
                for lay in v.layouts.values():
                    named = dict(lay.key)
                    env = {sym: named[str(sym)] for sym in v.binder.read}
                    frame[ring.name] = max(frame.get(ring.name, 0), lay.nbytes)
                    saved[ring.name] = max(saved.get(ring.name, 0),
                                           evaluate(v.plan.slot_bytes, env))
        arena = fp.arena_bytes()
        row.update(captures=fxslots.counters["captures"], fallbacks=fxslots.counters["fallbacks"],
                   recaptures=fxslots.counters["recaptures"],
                   compiles=fxslots.counters["compiles"],
                   slot_bytes=sum(arena.values()), arena_bytes=arena,
                   slots=sum(len(r.slots) for r in rings.values()),
                   planned_slots={s: self.plan.needed(s) for s in self.modules},
                   largest_frame=max(frame.values(), default=0),
                   largest_saved=max(saved.values(), default=0))
        want = sum(len(r.slots) * frame.get(n, 0) for n, r in rings.items())
        want_saved = sum(len(r.slots) * saved.get(n, 0) for n, r in rings.items())
        row["slots_x_frame_ratio"] = row["slot_bytes"] / want if want else None
        row["slots_x_saved_ratio"] = row["slot_bytes"] / want_saved if want_saved else None
        stage_frames = {int(m.group(1)): frame[n] for n in frame
                        if (m := re.search(r" stage (\d+)'$", n))}
        if self.case == "fxslots-per-chunk":
            row["plan_report"] = [dataclasses.asdict(b) for b in self.plan.report(stage_frames)]


def _root_line(e: BaseException) -> str:
    while e.__cause__ is not None:
        e = e.__cause__
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0][:300] if lines else ''}"


def _fxslots_counters() -> dict[str, int]:
    import fxslots

    return {k: fxslots.counters[k] for k in ("captures", "recaptures")}
