"""Host (Python) time per training step, on CPU, with CUDA graph replays made free.

The launch-bound model is host-bound on the H200: its GPU time per step is the same for eager,
reduce-overhead and fxslots, and the step takes twice that (docs/design.md). This measures the
host side alone, anywhere: the graph executor runs with a stand-in graph whose capture records
nothing and whose replay does nothing, so what remains is fxslots' bookkeeping (slot, views,
staging, output copies) plus Dynamo's and AOTAutograd's. Tiny tensors keep the kernels cheap.

    python benchmarks/host_overhead.py [--layers 24] [--steps 400] [--out host.json]
    python benchmarks/host_overhead.py --components [--accum]   # us per call, per part

Prints one table (microseconds per step, and fxslots' share) and writes JSON. A profile of the
fxslots case: add --profile.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import time

import torch


class _FreeGraph:
    """Stands in for torch.cuda.CUDAGraph: capture records nothing, replay does nothing."""

    def replay(self) -> None:
        pass


class _FreeCapturer:
    """Stands in for CudaCapturer: a capture runs the graph once, for its outputs."""

    def __init__(self, device):
        pass

    def capture(self, gm, args):
        return _FreeGraph(), gm(*args)


def _free_graphs() -> None:
    from fxslots import backend
    from fxslots.runtime.cudagraphs import executor

    backend._use_graphs = lambda device, options: True
    executor.CudaCapturer = _FreeCapturer


COMPONENTS = [
    # (label, module, owner, attribute): timed inclusive of what they call. An owner of None:
    # a function of the module, timed where the module calls it from.
    ("forward call", "fxslots.runtime.variant", "Variant", "forward"),
    ("  slot acquire", "fxslots.runtime.ring", "SlotRing", "acquire"),
    ("  layout lookup", "fxslots.runtime.variant", "Variant", "layout"),
    ("  note autograd node", "fxslots.runtime.variant", "Variant", "_note_node"),
    ("  output buffer choice", "fxslots.runtime.cudagraphs.executor", None, "forward_buffer"),
    ("  replay + input staging", "fxslots.runtime.cudagraphs.executor", "GraphExecutor",
     "_replay"),
    ("  outputs (views, copies)", "fxslots.runtime.cudagraphs.outputs", "Captured", "results"),
    ("backward call", "fxslots.runtime.variant", "Variant", "backward"),
    ("  find slot", "fxslots.runtime.ring", "SlotRing", "find"),
    ("  .grad buffers check", "fxslots.runtime.variant", "Variant", "_grad_buffers"),
    ("  alone in its pass", "fxslots.runtime.variant", "Variant", "_alone_in_backward"),
    ("  tangent staging", "fxslots.runtime.cudagraphs.delivery", "Tangents", "stage"),
    ("  gradient target", "fxslots.runtime.cudagraphs.executor", "GraphExecutor",
     "_deliver_into"),
    ("  release", "fxslots.runtime.ring", "SlotRing", "release"),
    # AOTAutograd's own per-saved-tensor work around the forward (torch 2.13; absent in some
    # versions, then left out)
    ("AOT: save for backward", "torch._functorch._aot_autograd.runtime_wrappers",
     "_AutogradSavedState", "save_from_forward"),
]


def _timed_components() -> dict[str, list[float]]:
    """Wrap each component in a timer; returns label -> [seconds, calls]."""
    import importlib

    totals: dict[str, list[float]] = {}
    for label, mod, owner, attr in COMPONENTS:
        module = importlib.import_module(mod)
        where = module if owner is None else getattr(module, owner, None)
        fn = getattr(where, attr, None)
        if fn is None:
            continue
        totals[label] = acc = [0.0, 0]

        def timed(*a, _fn=fn, _acc=acc, **k):
            t0 = time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                _acc[0] += time.perf_counter() - t0
                _acc[1] += 1

        setattr(where, attr, timed)
    return totals


def components(layers: int, steps: int, accum: bool = False) -> dict[str, float]:
    """Microseconds per call of each part of fxslots' forward and backward wrappers;
    ``accum``: persistent ``.grad`` buffers (``zero_grad(set_to_none=False)``)."""
    totals = _timed_components()
    measure("fxslots", layers, 12, accum=accum)  # compiled and captured before timing starts
    for acc in totals.values():
        acc[:] = [0.0, 0]
    measure("fxslots", layers, steps, warm=False, accum=accum)
    return {label: (acc[0] / acc[1] * 1e6 if acc[1] else 0.0) for label, acc in totals.items()}


def _model(layers: int, width: int) -> torch.nn.Module:
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width, bias=False), torch.nn.GELU()]
    return torch.nn.Sequential(*mods)


_LIVE: dict = {}


def measure(case: str, layers: int, steps: int, profile: bool = False,
            warm: bool = True, accum: bool = False) -> float:
    """Microseconds per step (forward, loss, backward, zero_grad), cycling four variants."""
    import fxslots

    if warm:
        fxslots.reset()
        _LIVE[case] = _model(layers, 16)
    m = _LIVE[case]
    if case == "eager":
        f = m
    elif case == "aot_eager":
        f = torch.compile(m, backend="aot_eager")
    else:
        f = torch.compile(m, backend="fxslots", options={"slots": 1})
    xs = [torch.randn(1, s, 16) for s in (8, 16, 24, 32)]

    def step(i: int) -> None:
        f(xs[i % 4]).float().square().mean().backward()
        m.zero_grad(set_to_none=not accum)

    for i in range(12 if warm else 0):  # compile, warm up, capture every variant
        step(i)
    t0 = time.perf_counter()
    for i in range(steps):
        step(i)
    us = (time.perf_counter() - t0) / steps * 1e6
    if profile:
        prof = cProfile.Profile()
        prof.enable()
        for i in range(steps):
            step(i)
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats("fxslots", 25)
    return us


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--out", default=None)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--components", action="store_true",
                    help="microseconds per call of each part of the forward and backward")
    ap.add_argument("--accum", action="store_true",
                    help="persistent .grad buffers (zero_grad(set_to_none=False))")
    args = ap.parse_args()
    _free_graphs()
    if args.components:
        parts = components(args.layers, args.steps, args.accum)
        print(f"{'component':<28} | us/call")
        print(f"{'-' * 28} | -------")
        for label, us in parts.items():
            print(f"{label:<28} | {us:7.1f}")
        if args.out:
            with open(args.out, "w") as fh:
                json.dump({"layers": args.layers, "accum": args.accum, "us_per_call": parts,
                           "torch": torch.__version__}, fh, indent=1)
        return
    rows = {case: measure(case, args.layers, args.steps, args.profile and case == "fxslots")
            for case in ("eager", "aot_eager", "fxslots")}
    print(f"{'case':<10} | us/step | note")
    print(f"{'-' * 10} | ------- | ----")
    notes = {"eager": "runs the (tiny) kernels too", "aot_eager": "runs the kernels too",
             "fxslots": "replays are free: host bookkeeping only"}
    for case, us in rows.items():
        print(f"{case:<10} | {us:7.0f} | {notes[case]}")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"layers": args.layers, "us_per_step": rows, "torch": torch.__version__},
                      fh, indent=1)


if __name__ == "__main__":
    main()
