"""Inference graphs (a forward under ``torch.no_grad`` or ``inference_mode``: an evaluation
between training steps) as CUDA graphs on the device's shared pool.

An inference graph saves nothing for a backward, so it takes no slot. Each input shape gets one
capture, after one uncaptured run (lazy initialisation must not land in a capture). A replay
copies the inputs that are not static (parameters and buffers are read where they are) into
staging memory of its own, outside the pool; replays; writes back the staged inputs the graph
mutated; and copies the outputs out of the pool, since the next replay of any graph there
reuses those bytes. A static input found moved (a parameter replaced) means a new capture; after
``RECAPTURE_LIMIT`` of them that shape runs uncaptured. Nothing here runs at import time.
"""

from __future__ import annotations

import logging
import weakref
from collections import Counter
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx

from ... import state
from ...capturable import uncapturable_reason
from ...fallback import capture_failed, run_uncaptured
from ...options import Options
from ...passes.collect import mutated_placeholders
from ...policies import anchors_of
from ..layout import make_views, pack
from ..alloc import lasting
from .outputs import Captured, describe_outputs
from .pool import CaptureFailed, CudaCapturer
from .staging import copy_staged, write_back

log = logging.getLogger(__name__)

RECAPTURE_LIMIT = 3  # captures of one shape, after which a moving static input runs uncaptured


def inference_runner(options: Options, gm: fx.GraphModule, example_inputs: Sequence[Any],
                     run: Callable[..., Any], static: Sequence[int]) -> Callable[[list], Any]:
    """What runs the inference graph ``gm`` (compiled as ``run``): its CUDA graphs where it is
    on a CUDA device and ``options`` ask for them (``capture_inference``, ``cudagraphs``), else
    ``run`` itself."""
    state.counters["inference_graphs"] += 1
    device = next((x.device for x in example_inputs if isinstance(x, torch.Tensor)), None)
    if (off := _off(device, options)) is not None:
        return Uncaptured(run, off)
    why = uncapturable_reason(None, gm, device, static) or _host_input(gm, device, static)
    if why is not None:
        run_uncaptured(f"an inference graph: {why}", options.strict, slots=False)
        return Uncaptured(run, why)
    return InferenceGraphs(run, gm, device, options, static)


def captures_on(device: torch.device, options: Options) -> bool:
    return device.type == "cuda" and options.cudagraphs is not False


def _off(device: torch.device | None, options: Options) -> str | None:
    """Why inference graphs on ``device`` are not captured, as ``options`` say: or None."""
    if not options.capture_inference:
        return "options={'capture_inference': False}"
    if device is None:
        return "it reads no tensor"
    if not captures_on(device, options):
        return (f"it runs on {device}" if device.type != "cuda"
                else "options={'cudagraphs': False}")
    return None


class Uncaptured:
    """An inference graph run as compiled: ``how`` says why it is not captured."""

    def __init__(self, run: Callable[..., Any], why: str):
        self.run, self.how = run, f"runs uncaptured: {why}"

    def __call__(self, args: list[Any]) -> Any:
        return self.run(*args)


def _host_input(gm: fx.GraphModule, device: torch.device, static: Sequence[int]) -> str | None:
    """A capture would bake a host tensor input's value into the graph: why, or None."""
    for i, p in enumerate(gm.graph.find_nodes(op="placeholder")):
        val = p.meta.get("val")
        if i not in static and isinstance(val, torch.Tensor) and val.device != device:
            return (f"input {p.name} is a {val.device} tensor, whose value a capture would "
                    f"keep for every replay; pass it on {device} to capture this graph")
    return None


class InferenceGraphs:
    """The CUDA graphs of one inference graph, one per input shape (``_key``)."""

    how = ("captured as a CUDA graph per input shape, at its second call (inputs staged, "
           "outputs copied out of the pool)")

    def __init__(self, run: Callable[..., Any], gm: fx.GraphModule, device: torch.device,
                 options: Options, static: Sequence[int]):
        self.run, self.device, self.options = run, device, options
        self.static = frozenset(static)
        self.capturer = CudaCapturer(device, options)
        self.graphs: dict[tuple, Captured] = {}
        self.warm: dict[tuple, int] = {}  # key -> Inductor's compile count at its warm-up
        self.captured: Counter = Counter()  # captures per key
        self.uncaptured: set[tuple] = set()
        self._mutated = _mutated_inputs(gm)
        tensors = [i for i, p in enumerate(gm.graph.find_nodes(op="placeholder"))
                   if i in self.static and isinstance(p.meta.get("val"), torch.Tensor)]
        # The first and last parameter name a module: one graph serves every block compiled on
        # its own, each with its own capture (as training's ring keys do); chosen at the first
        # call (policies.anchors_of)
        self._candidates, self._anchors = tuple(tensors), None
        state.inference.add(self)

    def __call__(self, args: list[Any]) -> Any:
        if self._anchors is None:
            self._anchors = anchors_of(args, self._candidates)
        key = self._key(args)
        cap = self.graphs.get(key)
        if cap is not None and cap.moved(args) is None:
            return self._replay(cap, args)
        if key in self.uncaptured or self._cold(key):
            if key not in self.warm:  # a key's first run: what it keeps goes with its module
                self._forget_with(args, key)
            self.warm[key] = state.counters["inductor_compiles"]
            return self.run(*args)
        cap = self._capture(key, args)
        return self.run(*args) if cap is None else self._replay(cap, args)

    def free(self) -> None:
        self.graphs = {}

    def _key(self, args: list[Any]) -> tuple:
        """The input shapes and the module: its anchors by identity, which a parameter moved
        in place (``.data =``, a regathered shard) keeps, so that one recaptures (bounded)."""
        return (*(id(args[i]) for i in self._anchors),
                *((a.dtype, tuple(a.shape), a.stride()) if isinstance(a, torch.Tensor)
                  else a for i, a in enumerate(args) if i not in self.static))

    def _forget_with(self, args: list[Any], key: tuple) -> None:
        """Drop what ``key`` keeps (its graph, counts, verdicts) when either anchor of its
        module dies: a later module may reuse the id (and the first anchor may be a parameter
        the modules share)."""
        me = weakref.ref(self)

        def drop() -> None:
            if (graphs := me()) is not None:
                graphs.graphs.pop(key, None)
                graphs.captured.pop(key, None)
                graphs.warm.pop(key, None)
                graphs.uncaptured.discard(key)
        for i in dict.fromkeys(self._anchors):
            weakref.finalize(args[i], drop)

    def _cold(self, key: tuple) -> bool:
        """Whether ``key`` runs uncaptured first: never run, or Inductor's code compiled more
        since (a kernel tuned in a capture would be lost)."""
        last = self.warm.get(key)
        return last is None or (last != state.counters["inductor_compiles"]
                                and not isinstance(self.run, fx.GraphModule))

    def _replay(self, cap: Captured, args: list[Any]) -> Any:
        copy_staged(cap.stage, args)
        cap.graph.replay()
        write_back(args, cap.writeback)
        return cap.results((None, None), self.device)

    def _capture(self, key: tuple, args: list[Any]) -> Captured | None:
        if self.captured[key] >= RECAPTURE_LIMIT:
            self.uncaptured.add(key)
            run_uncaptured(f"an inference graph's static inputs moved after each of its "
                           f"{RECAPTURE_LIMIT} captures at one shape", self.options.strict,
                           slots=False)
            return None
        self.graphs.pop(key, None)  # a moved input: its memory goes before the new capture
        stage = self._stage(args)
        gargs = list(args)
        for i, view in stage:
            gargs[i] = view
        copy_staged(stage, args)
        try:
            graph, outs = self.capturer.capture(self.run, gargs)
        except CaptureFailed as failed:
            state.counters["capture_failures"] += 1
            self._failed(key, failed)
            return None
        self.captured[key] += 1
        state.counters["inference_captures"] += 1
        log.info("inference graph: captured (%d inference captures in all)",
                 state.counters["inference_captures"])
        staged = {v.untyped_storage().data_ptr() for _, v in stage}
        cap = self.graphs[key] = Captured(
            graph, tuple((i, a.data_ptr()) for i, a in enumerate(args)
                         if isinstance(a, torch.Tensor) and i in self.static),
            stage, describe_outputs(outs, gargs, {}, staged),
            tuple((i, v) for i, v in stage if i in self._mutated))
        return cap

    def _stage(self, args: list[Any]) -> tuple[tuple[int, torch.Tensor], ...]:
        """Where replays copy the non-static tensor inputs: one buffer, each input's strides."""
        indices = [i for i, a in enumerate(args)
                   if isinstance(a, torch.Tensor) and i not in self.static]
        geometry, nbytes = pack([(args[i].dtype, tuple(args[i].shape), args[i].stride())
                                 for i in indices], self.options.alignment)
        with torch.inference_mode(False):  # written by later calls, maybe outside that mode
            storage = lasting(nbytes, self.device).untyped_storage()
        return tuple(zip(indices, make_views(storage, self.device, geometry), strict=True))

    def _failed(self, key: tuple, failed: CaptureFailed) -> None:
        capture_failed(failed, "an inference graph", not isinstance(self.run, fx.GraphModule),
                       "options={'capture_inference': False} for every inference graph",
                       self.options, self.uncaptured, key)


def _mutated_inputs(gm: fx.GraphModule) -> set[int]:
    mutated = mutated_placeholders(gm)
    return {i for i, p in enumerate(gm.graph.find_nodes(op="placeholder")) if p in mutated}
