"""The measuring side of benchmarks/bench.py, run inside each case's own process: models and
their microbatches, schedules, compiling a case, timed repetitions, memory, fxslots' figures
and the gradient check against an eager twin."""

from __future__ import annotations

import functools
import os
import statistics
import sys
import time
from typing import Any, Callable

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

Step = Callable[[Any, int], None]  # step(model_or_compiled, k): the k-th step of a schedule


def build_model(cfg: dict, device: torch.device) -> torch.nn.Module:
    torch.manual_seed(0)
    with device:  # initialized where it runs: seconds saved on the large models
        if cfg["kind"] == "mlp":
            layers: list[torch.nn.Module] = []
            for _ in range(cfg["layers"]):
                layers += [torch.nn.Linear(cfg["H"], cfg["H"], bias=False), torch.nn.GELU()]
            model: torch.nn.Module = torch.nn.Sequential(*layers)
        else:
            import dataclasses

            from examples.llama import SIZES, Llama

            model = Llama(dataclasses.replace(SIZES[cfg["size"]],
                                              checkpoint=cfg.get("checkpoint", False)))
    return model.to(dtype=torch.bfloat16)


class Workload:
    """A model, ``microbatches`` inputs per sequence variant, and its loss."""

    def __init__(self, cfg: dict, device: str, seqs=None, microbatches: int = 1):
        self.cfg, self.device = cfg, torch.device(device)
        self.seqs = tuple(seqs or cfg["seqs"])
        self.model = build_model(cfg, self.device)
        g = torch.Generator(device=self.device).manual_seed(0)
        self.batches = {s: [self._batch(s, g) for _ in range(microbatches)] for s in self.seqs}

    def _batch(self, s: int, g: torch.Generator) -> tuple:
        if self.cfg["kind"] == "mlp":
            return (torch.randn(self.cfg["batch"], s, self.cfg["H"], device=self.device,
                                dtype=torch.bfloat16, generator=g),)
        from examples.llama import SIZES, batch

        return batch(SIZES[self.cfg["size"]], self.cfg["batch"], s, self.device, g)

    def loss(self, f: Any, s: int, i: int = 0) -> torch.Tensor:
        """The Llama returns its cross-entropy; the MLPs' loss is y.float().square().mean()."""
        out = f(*self.batches[s][i])
        return out if self.cfg["kind"] == "llama" else out.float().square().mean()

    def twin(self) -> torch.nn.Module:
        """An eager copy with the same weights, for the gradient check."""
        ref = build_model(self.cfg, self.device)
        ref.load_state_dict(self.model.state_dict())
        return ref


def make_step(schedule: str, work: Workload, mark: Callable[[], None]) -> Step:
    """One step of ``schedule``; ``mark`` starts it (reduce-overhead's step marker)."""
    seqs = work.seqs

    def sequential(f: Any, k: int) -> None:  # one microbatch, cycling the variants
        mark()
        work.loss(f, seqs[k % len(seqs)]).backward()

    def ffffbbbb(f: Any, k: int) -> None:  # every variant in flight
        mark()
        for loss in [work.loss(f, s) for s in seqs]:
            loss.backward()

    def one_f_one_b(f: Any, k: int) -> None:  # 4 microbatches of one variant, 2 in flight
        s = seqs[k % len(seqs)]
        mark()
        pending = [work.loss(f, s, 0), work.loss(f, s, 1)]
        for i in (2, 3):
            pending.pop(0).backward()
            pending.append(work.loss(f, s, i))
        for loss in pending:
            loss.backward()

    def evaluate(f: Any, k: int) -> None:  # the loss under no_grad: an inference graph
        mark()
        with torch.no_grad():
            work.loss(f, seqs[k % len(seqs)])

    return {"sequential": sequential, "accum": sequential, "ffffbbbb": ffffbbbb,
            "1f1b": one_f_one_b, "eval": evaluate}[schedule]


def steps_per_pass(schedule: str, work: Workload) -> int:
    """Steps that run every variant once."""
    return 1 if schedule == "ffffbbbb" else len(work.seqs)


def with_zero_grad(step: Step, model: torch.nn.Module, schedule: str) -> Step:
    """The step, then zero_grad; set_to_none=False (persistent .grad buffers) for accum."""
    def run(f: Any, k: int) -> None:
        step(f, k)
        model.zero_grad(set_to_none=schedule != "accum")

    return run


def mark_for(backend: str) -> Callable[[], None]:
    if backend == "reduce-overhead":
        return torch.compiler.cudagraph_mark_step_begin
    return lambda: None


def compile_case(model: torch.nn.Module, backend: str, options: dict, dynamic) -> Any:
    """``model`` as the case runs it."""
    for key in ("cache_size_limit", "recompile_limit"):  # 16 static variants must all compile
        if hasattr(torch._dynamo.config, key):
            setattr(torch._dynamo.config, key, 64)
    if backend in ("eager", "save_on_cpu"):
        return model
    if backend == "inductor":
        return torch.compile(model, dynamic=dynamic)
    if backend == "reduce-overhead":
        return torch.compile(model, mode="reduce-overhead", dynamic=dynamic)
    if backend == "aot_eager":
        return torch.compile(model, backend="aot_eager", dynamic=dynamic)
    if "fxslots" in torch._dynamo.list_backends(exclude_tags=()):
        return torch.compile(model, backend="fxslots", options=options, dynamic=dynamic)
    from fxslots.backend import fxslots_backend  # not pip-installed: no entry point

    return torch.compile(model, backend=functools.partial(fxslots_backend, options=options),
                         dynamic=dynamic)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_reps(run: Step, f: Any, device: torch.device, reps: int, steps: int) -> list[float]:
    """Milliseconds per step of each repetition: ``steps`` steps, synchronized around."""
    out, k = [], 0
    for _ in range(reps):
        sync(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            run(f, k)
            k += 1
        sync(device)
        out.append((time.perf_counter() - t0) / steps * 1e3)
    return out


def spread(values: list[float], key: str) -> dict[str, Any]:
    """``key`` (the median), ``key_min``, ``key_max`` and every repetition's value."""
    return {key: statistics.median(values), f"{key}_min": min(values),
            f"{key}_max": max(values), f"{key}_reps": [round(v, 4) for v in values]}


class Memory:
    """Peak allocated above what existed at the start (model, inputs), and reserved; CUDA only."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        sync(device)
        self.base = torch.cuda.memory_allocated() if self.cuda else 0
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()

    def peak_gib(self, reset: bool = False) -> float | None:
        if not self.cuda:
            return None
        peak = (torch.cuda.max_memory_allocated() - self.base) / 2**30
        if reset:
            torch.cuda.reset_peak_memory_stats()
        return peak

    def reserved_gib(self) -> float | None:
        return torch.cuda.memory_reserved() / 2**30 if self.cuda else None

    def reserved_split(self) -> dict[str, float]:
        """Where reserved memory is: the default pool's allocated and cached-free bytes, and
        private pools (CUDA graphs': fxslots' shared pool, reduce-overhead's trees)."""
        if not self.cuda:
            return {}
        split = {"default_alloc_gib": 0.0, "cached_free_gib": 0.0, "graph_pools_gib": 0.0,
                 "graph_pools_alloc_gib": 0.0}
        for seg in torch.cuda.memory_snapshot():
            private = tuple(seg.get("segment_pool_id", (0, 0))) != (0, 0)
            if private:
                split["graph_pools_gib"] += seg["total_size"] / 2**30
                split["graph_pools_alloc_gib"] += seg["allocated_size"] / 2**30
            else:
                split["default_alloc_gib"] += seg["allocated_size"] / 2**30
                split["cached_free_gib"] += (seg["total_size"] - seg["allocated_size"]) / 2**30
        return {k: round(v, 4) for k, v in split.items()}


def fxslots_counter(name: str) -> int:
    import fxslots

    return int(fxslots.counters[name])


def _layout_figures(regions) -> list[dict[str, int]]:
    """Per (variant, concrete shape) of ``regions`` that ran: its plan's byte figures."""
    from fxslots.schemas import evaluate

    out = []
    for region in regions:
        for v in region.live_variants():
            for lay in v.layouts.values():
                named = dict(lay.key)
                env = {sym: named[str(sym)] for sym in v.binder.read}
                out.append({k: evaluate(getattr(v.plan, k, 0), env) for k in
                            ("slot_bytes", "copy_free_bytes", "copied_bytes", "offloaded_bytes",
                             "staged_bytes")})
    return out


def fxslots_figures(regions=None) -> dict[str, Any]:
    """Captures, slot bytes, the copy-free fraction of saved bytes, and bytes copied (saved
    values and staged inputs) and offloaded per forward (the largest variant's), over
    ``regions`` (default: every live one; the counters are the process's)."""
    import fxslots

    regions = fxslots.regions() if regions is None else regions
    lays = _layout_figures(regions)
    slots = [s.nbytes for r in regions for s in r.ring.slots]
    saved = sum(x["slot_bytes"] for x in lays)
    return dict(captures=fxslots_counter("captures"), compiles=fxslots_counter("compiles"),
                recaptures=fxslots_counter("recaptures"),
                # kernels="inductor": a graph Inductor refused runs ATen kernels (run 38d).
                inductor_fallbacks=fxslots_counter("inductor_fallbacks"),
                # bytes of gradients placed in arenas, summed over the placements made
                grad_bytes_in_arena=fxslots_counter("grad_bytes_in_arena"),
                slot_bytes=sum(slots), n_slots=len(slots), layouts=len(lays),
                largest_saved_bytes=max((x["slot_bytes"] for x in lays), default=0),
                # Staged inputs are copies too (issue 10): counted in, and shown apart.
                copied_bytes_per_forward=max((x["copied_bytes"] + x["staged_bytes"]
                                              for x in lays), default=0),
                staged_bytes_per_forward=max((x["staged_bytes"] for x in lays), default=0),
                offloaded_bytes_per_forward=max((x["offloaded_bytes"] for x in lays), default=0),
                copy_free_fraction=(sum(x["copy_free_bytes"] for x in lays) / saved
                                    if saved else None))


def grad_error(work: Workload, f: Any, step: Step) -> float:
    """From no gradients, two more steps on ``f`` and on an eager twin (gradients accumulate
    over both): the largest difference relative to the twin's largest gradient."""
    ref = work.twin()
    for mod in (work.model, ref):
        for p in mod.parameters():
            p.grad = None
    for k in range(2):
        step(f, k)
        step(ref, k)
    err = 0.0
    for a, b in zip(work.model.parameters(), ref.parameters(), strict=True):
        if a.grad is None or b.grad is None:
            if (a.grad is None) != (b.grad is None):
                return float("inf")
            continue
        scale = b.grad.float().abs().max().item() or 1.0
        err = max(err, (a.grad.float() - b.grad.float()).abs().max().item() / scale)
    return err


def output_error(work: Workload, f: Any) -> float:
    """The largest difference of ``f``'s loss from an eager twin's under no_grad, over the
    sequence variants, relative to the twin's (what the eval schedule checks: no gradients)."""
    ref = work.twin()
    err = 0.0
    with torch.no_grad():
        for s in work.seqs:
            a, b = work.loss(f, s).float(), work.loss(ref, s).float()
            err = max(err, ((a - b).abs().max() / (b.abs().max() or 1.0)).item())
    return err


def error_text(e: BaseException) -> str:
    """The exception and, when it wraps another (Dynamo's BackendCompilerFailed), the root cause
    with Dynamo's advice about verbose logs cut off."""
    root = e
    while getattr(root, "inner_exception", None) or root.__cause__:
        root = getattr(root, "inner_exception", None) or root.__cause__
    text = str(root).split("\n\nSet TORCHDYNAMO_VERBOSE")[0].strip()
    outer = f" (raised through {type(e).__name__})" if root is not e else ""
    return f"{type(root).__name__}: {text}"[:600] + outer
