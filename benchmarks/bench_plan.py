"""What benchmarks/bench.py runs: models, presets, the cases of each part, runtime estimates.

A case is a plain dict (it travels to the case's own process as JSON): ``part``, ``model``,
``schedule``, ``case`` (the label in tables) and what the part's runner reads (``backend``,
``options``, ``dynamic``...). A case with ``skip`` set is not run: its row says why.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

PARTS = ("speed", "host", "warmup", "offload", "compile")
SCHEDULES = ("sequential", "accum", "1f1b", "ffffbbbb")
MLP_SEQS = (512, 1024, 1536, 2048)
MODELS: dict[str, dict[str, Any]] = {
    "heavy": dict(kind="mlp", H=4096, layers=8, batch=4, seqs=MLP_SEQS),
    "launch-bound": dict(kind="mlp", H=1024, layers=24, batch=1, seqs=MLP_SEQS),
    "llama-small": dict(kind="llama", size="llama-small", batch=2, seqs=(256, 512)),
    "llama-large": dict(kind="llama", size="llama-large", batch=4, seqs=(1024, 2048)),
    # llama-small with each block under activation checkpointing (SDPA, a random op, in each)
    "llama-small-ckpt": dict(kind="llama", size="llama-small", batch=2, seqs=(256, 512),
                             checkpoint=True),
}
SMOKE_MODELS: dict[str, dict[str, Any]] = {  # same code paths, tiny, on CPU
    "heavy": dict(kind="mlp", H=64, layers=2, batch=2, seqs=(8, 16, 24, 32)),
    "launch-bound": dict(kind="mlp", H=32, layers=4, batch=1, seqs=(8, 16, 24, 32)),
    "llama-small": dict(kind="llama", size="llama-tiny", batch=2, seqs=(16, 32)),
    "llama-large": dict(kind="llama", size="llama-tiny", batch=1, seqs=(32, 64)),
    "llama-small-ckpt": dict(kind="llama", size="llama-tiny", batch=2, seqs=(16, 32),
                             checkpoint=True),
}
WARMUP_SEQS = tuple(range(128, 2049, 128))  # 16 variants of the launch-bound MLP
SMOKE_WARMUP_SEQS = tuple(range(8, 129, 8))
OFFLOAD_SEQ = {"heavy": 2048, "llama-small": 512}
DEFAULT_MODELS = {"speed": ("heavy", "launch-bound", "llama-small", "llama-large"),
                  "host": ("launch-bound", "llama-small"),
                  "warmup": ("launch-bound",), "offload": ("heavy", "llama-small"),
                  "compile": ("llama-small",)}
CUDA_ONLY = {"inductor": "Inductor's CUDA kernels", "reduce-overhead": "CUDA graph trees",
             "host-link": "a host<->device link"}


@dataclass(frozen=True)
class Settings:
    """How long each measurement runs, and under what limits."""

    preset: str = "full"
    reps: int = 7  # timed repetitions: the median and the spread are over these
    steps: int = 12  # steps per repetition
    warm_passes: int = 3  # warm-up passes over every variant before timing
    host_calls: int = 100  # forward/backward calls per repetition in the host part
    offload_reps: int = 7
    warmup_reps: int = 5
    second_shape: bool = True  # compile part: also time the recompile at a second shape
    case_timeout_s: float = 420.0
    budget_s: float | None = None  # all parts together; skipped cases say so
    smoke: bool = False
    device: str = "cuda"
    auto_shares: tuple[float, ...] = ()  # offload part: "auto:<share>" cases


def settings_for(preset: str, smoke: bool, device: str) -> Settings:
    s = Settings(device=device, smoke=smoke)
    if preset == "quick":
        s = replace(s, preset="quick", reps=5, steps=8, host_calls=50, offload_reps=3,
                    warmup_reps=3, second_shape=False, case_timeout_s=150.0, budget_s=440.0)
    if smoke:
        s = replace(s, reps=5, steps=4, warm_passes=2, host_calls=10, offload_reps=3,
                    warmup_reps=2, case_timeout_s=300.0, budget_s=None)
    return s


def model_config(name: str, smoke: bool) -> dict[str, Any]:
    return dict((SMOKE_MODELS if smoke else MODELS)[name])


def slots_for(schedule: str, n_variants: int) -> int:
    return {"sequential": 1, "accum": 1, "1f1b": 2, "ffffbbbb": n_variants, "eval": 1}[schedule]


def variant_label(options: dict[str, Any]) -> str:
    return "fxslots " + ",".join(f"{k}={v}" for k, v in options.items())


def case(part: str, model: str, schedule: str, label: str, s: Settings, **kw: Any) -> dict:
    """One case; CUDA-only backends become skipped rows off CUDA."""
    spec = dict(part=part, model=model, schedule=schedule, case=label, device=s.device,
                smoke=s.smoke, backend=label, options={}, dynamic=None,
                cfg=model_config(model, s.smoke) if model in MODELS else None)
    spec.update(kw)
    need = CUDA_ONLY.get(spec["backend"])
    if need and s.device != "cuda":
        spec["skip"] = f"CUDA only ({need}); not run on {s.device}"
    return spec


QUICK_SPEED = (  # (model, schedule, backends), most wanted first: a budget cut drops the tail
    ("launch-bound", "sequential", ("eager", "fxslots", "reduce-overhead")),
    ("launch-bound", "accum", ("eager", "fxslots", "reduce-overhead")),
    ("heavy", "sequential", ("eager", "fxslots", "reduce-overhead")),
    ("llama-large", "sequential", ("eager", "fxslots")),
    ("launch-bound", "1f1b", ("eager", "fxslots", "reduce-overhead")),
    ("launch-bound", "ffffbbbb", ("eager", "fxslots", "reduce-overhead")),
    ("llama-large", "accum", ("eager", "fxslots")),
)
FULL_BACKENDS = ("eager", "inductor", "reduce-overhead", "fxslots")


def schedules_of(model: str) -> tuple[str, ...]:
    """FFFFBBBB puts every variant in flight: the MLPs only."""
    return SCHEDULES if MODELS[model]["kind"] == "mlp" else SCHEDULES[:3]


def _speed_groups(models: list[str], s: Settings) -> list[tuple[str, str, tuple[str, ...]]]:
    if s.preset == "quick":
        return [g for g in QUICK_SPEED if g[0] in models]
    return [(m, sch, FULL_BACKENDS) for m in models for sch in schedules_of(m)]


def speed_cases(models: list[str], s: Settings, variants: list[dict]) -> list[dict]:
    out = []
    for model, schedule, backends in _speed_groups(models, s):
        if s.device != "cuda" and schedule == "sequential" and "eager" in backends:
            backends = (*backends, "aot_eager")  # the CPU stand-in for a compiled baseline
        if (schedule == "sequential" and "inductor" not in backends
                and any(v.get("kernels") == "inductor" for v in variants)):
            # torch.compile's default beside kernels="inductor": the same fused kernels, so
            # its step time and its bf16 gradient error against eager are the bar.
            backends = (*backends, "inductor")
        for b in backends:
            k = slots_for(schedule, len(model_config(model, s.smoke)["seqs"]))
            out.append(case("speed", model, schedule, b, s,
                            options={"slots": k} if b == "fxslots" else {}))
            if b == "fxslots":
                out += [dict(case("speed", model, schedule, variant_label(v), s,
                                  options={"slots": k, **v}), backend="fxslots")
                        for v in variants]
    return out


def host_cases(models: list[str], s: Settings) -> list[dict]:
    return [case("host", m, "fwd+bwd calls", b, s, options={"slots": 1} if b == "fxslots"
                 else {}) for m in models for b in ("eager", "fxslots", "reduce-overhead")]


def warmup_cases(models: list[str], s: Settings) -> list[dict]:
    rows = [("fxslots", True, False), ("fxslots", True, True), ("reduce-overhead", True, False),
            ("reduce-overhead", None, False)]
    if s.preset != "quick":
        rows.append(("reduce-overhead", False, False))  # DESIGN.md's static anchor: 16 compiles
    out = []
    for m in models:
        for b, dyn, prep in rows:
            label = f"{b} " + ("default" if dyn is None else f"dynamic={dyn}")
            out.append(dict(case("warmup", m, "16 variants", b, s, dynamic=dyn, prepare=prep,
                                 seqs=SMOKE_WARMUP_SEQS if s.smoke else WARMUP_SEQS,
                                 options={"slots": 1} if b == "fxslots" else {}),
                            case=label + (" + prepare" if prep else "")))
    return out


def offload_cases(models: list[str], s: Settings) -> list[dict]:
    out = [case("offload", "-", "-", "host-link", s)] if models else []
    for m in models:
        seq = SMOKE_MODELS[m]["seqs"][-1] if s.smoke else OFFLOAD_SEQ[m]
        out += [case("offload", m, "offload", b, s, seq=seq) for b in ("eager", "save_on_cpu")]
        for mode in ("none", "all", "auto", "half"):
            label = "fxslots offload=" + ("<half of none's saved bytes>" if mode == "half"
                                          else mode)
            out.append(dict(case("offload", m, "offload", "fxslots", s, offload=mode, seq=seq),
                            case=label))
        # "all" as it ran before the offload window: every copy joined where the link is done
        out.append(dict(case("offload", m, "offload", "fxslots", s, offload="all", seq=seq,
                             window=UNBOUNDED_WINDOW),
                        case="fxslots offload=all, unbounded window"))
        out += [dict(case("offload", m, "offload", "fxslots", s, offload=f"auto:{k:g}",
                          seq=seq), case=f"fxslots offload=auto:{k:g}")
                for k in s.auto_shares]
    return out


UNBOUNDED_WINDOW = 2**50


def compile_cases(models: list[str], s: Settings) -> list[dict]:
    return [dict(case("compile", m, "first compile", b, s, dynamic=dyn,
                      second_shape=s.second_shape), case=f"{b} dynamic={dyn}")
            for m in models for b in ("aot_eager", "fxslots") for dyn in (False, True)]


def plan(parts: list[str], models: list[str] | None, s: Settings,
         variants: list[dict]) -> dict[str, list[dict]]:
    """The cases of each part, in running order; ``models`` None: each part's defaults."""
    builders = {"speed": lambda ms: speed_cases(ms, s, variants), "host": lambda ms:
                host_cases(ms, s), "warmup": lambda ms: warmup_cases(ms, s),
                "offload": lambda ms: offload_cases(ms, s), "compile": lambda ms:
                compile_cases(ms, s)}
    if s.preset == "quick" and models is None:
        models_of = {**DEFAULT_MODELS, "host": ("launch-bound",), "offload": ("heavy",)}
    else:
        models_of = DEFAULT_MODELS
    out = {}
    for p in parts:
        ms = [m for m in models_of[p] if models is None or m in models]
        out[p] = [dict(c, settings=asdict(s)) for c in builders[p](ms)]
    return out


# Rough seconds per case on an H200 (torch 2.11), from the runs in benchmarks/results/: process
# start with torch already imported, plus compile and capture (MLP figures measured; the Llama
# compile times are guesses scaled from Dynamo's tracing time on CPU), plus the steps themselves.
STARTUP_S = 4.0
COMPILE_S = {"mlp": {"eager": 0, "aot_eager": 3, "fxslots": 5, "inductor": 15,
                     "reduce-overhead": 15},
             "llama": {"eager": 0, "aot_eager": 15, "fxslots": 25, "inductor": 80,
                       "reduce-overhead": 80}}
STEP_MS = {"heavy": 7.0, "launch-bound": 4.0, "llama-small": 35.0, "llama-large": 45.0,
           "llama-small-ckpt": 45.0}
WARMUP_S = {"fxslots": 10.0, "reduce-overhead": 15.0}
STATIC_WARMUP_S = 55.0  # reduce-overhead, dynamic=False: one compile per variant
MICROBATCHES = {"sequential": 1, "accum": 1, "1f1b": 4, "ffffbbbb": 4}


def estimate_s(spec: dict, s: Settings, seen: set | None = None) -> float:
    """A rough wall-clock estimate of one case on an H200 (see the constants above). ``seen``:
    the (model, backend) pairs compiled before it, whose Inductor compiles hit the cache."""
    if spec.get("skip"):
        return 0.0
    part, model, backend = spec["part"], spec["model"], spec["backend"]
    if part == "warmup":
        warm = STATIC_WARMUP_S if spec["dynamic"] is False else WARMUP_S[backend]
        return STARTUP_S + warm + s.warmup_reps * 16 * 2.5e-3
    if model == "-":  # the host-link probe
        return STARTUP_S + 2.0
    compile_s = COMPILE_S[MODELS[model]["kind"]].get(backend, 0.0)
    if seen is not None:
        if (model, backend) in seen and backend in ("inductor", "reduce-overhead"):
            compile_s *= 0.4
        seen.add((model, backend))
    return STARTUP_S + _run_s(spec, s, compile_s, STEP_MS[model])


def _run_s(spec: dict, s: Settings, compile_s: float, ms: float) -> float:
    part, backend = spec["part"], spec["backend"]
    if part == "speed":
        steps = (s.warm_passes * 4 + s.reps * s.steps + 4) * MICROBATCHES[spec["schedule"]]
        return compile_s + steps * ms / 1e3
    if part == "host":
        return compile_s / 2 + (s.reps * s.host_calls + 20) * ms / 1e3
    if part == "offload":
        slow = 6.0 if backend == "save_on_cpu" else 1.5
        return 2.0 + compile_s / 2 + (s.offload_reps * s.steps + 10) * ms * slow / 1e3
    shapes = 2 if s.second_shape and not spec["dynamic"] else 1  # compile part: one compile each
    return 1.0 + compile_s / 2 * shapes


def part_estimate(specs: list[dict], s: Settings) -> float:
    seen: set = set()
    return sum(estimate_s(c, s, seen) for c in specs)
