"""CUDA graphs: one capture per (variant, slot, direction, shape), all on one shared pool.

Why ``torch.cuda.CUDAGraph`` and not CUDA graph trees: the trees assume every live pool
allocation is a tracked output that dies at the next generation; slot lifetimes (a forward's saved
tensors outlive other replays until their backward) and persistent ``.grad`` buffers break that
(docs/design.md has the measured failures). Here the pool holds only what dies within a replay:

- saved tensors live in the slot arena (outside the pool, at a fixed address per slot);
- non-static inputs are staged into the slot (forward) or the ring's staging buffer (backward);
- user outputs and gradients are copied out of the pool right after the replay into memory the
  caller owns, so a later replay of any graph may reuse those pool bytes as scratch.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from . import _torch
from .errors import CaptureError
from .options import Options
from .passes.collect import mutated_placeholders
from .runtime import (
    Slot,
    Variant,
    make_views,
    offloaded_spans,
    pack,
    reload,
    slot_views,
    view_runs,
)

_CPU = torch.device("cpu")

log = logging.getLogger(__name__)

_POOLS: dict[int, tuple[Any, torch.cuda.CUDAGraph]] = {}


def shared_pool(device: torch.device) -> Any:
    """The one memory pool every fxslots graph on ``device`` is captured into.

    A tiny graph captured into it stays alive with it: the allocator frees a private pool when
    its last graph dies, and a handle used after that trips an internal assert. fxslots deletes
    graphs whose arena moved, which can be all of them at once.
    """
    index = _device_index(device)
    if index not in _POOLS:
        handle = torch.cuda.graph_pool_handle()
        keeper = torch.cuda.CUDAGraph()
        with torch.cuda.device(index), torch.cuda.graph(keeper, pool=handle):
            torch.zeros(1, device=f"cuda:{index}").add_(1)
        _POOLS[index] = (handle, keeper)
    return _POOLS[index][0]


def _device_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


class _NodeTracker(fx.Interpreter):
    """Runs a graph node by node, remembering the node in flight (to name a capture failure)."""

    current: fx.Node | None = None

    def run_node(self, n: fx.Node) -> Any:
        self.current = n
        return super().run_node(n)


@dataclass
class _Out:
    """How to hand one graph output back after a replay."""

    kind: str  # "const": the same object; "slot"/"host": a view over the slot's device/host
    # arena, rebuilt over each forward's alias; "pool": copied out
    value: Any = None  # const: the value; pool: a non-owning view of the pool bytes
    geometry: tuple | None = None  # slot: (dtype, element offset, shape, stride)


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    static: tuple[tuple[int, int], ...]  # (argument, data_ptr) of inputs not staged by fxslots
    stage: tuple[tuple[int, torch.Tensor], ...]  # (argument, where replays copy it to)
    outs: list[_Out]
    writeback: tuple[tuple[int, torch.Tensor], ...] = ()  # staged inputs the graph mutates

    def __post_init__(self) -> None:
        # Saved outputs are rebuilt over each forward's alias: group them once, here.
        self.slot_outs = [j for j, o in enumerate(self.outs) if o.kind == "slot"]
        self.slot_runs = view_runs([self.outs[j].geometry for j in self.slot_outs])
        self.host_outs = [j for j, o in enumerate(self.outs) if o.kind == "host"]
        self.host_runs = view_runs([self.outs[j].geometry for j in self.host_outs])
        # Outputs copied out of the pool land, dense, in one fresh buffer per replay.
        self.pool_outs = [j for j, o in enumerate(self.outs) if o.kind == "pool"]
        geometry, self.pool_nbytes = pack([(self.outs[j].value.dtype,
                                            tuple(self.outs[j].value.shape),
                                            self.outs[j].value.stride())
                                           for j in self.pool_outs], 16)
        self.pool_runs = view_runs(geometry)


class GraphExecutor:
    """Replays captured CUDA graphs for one variant; captures on first use of each key."""

    def __init__(self, options: Options):
        self.options = options
        self.graphs: dict[tuple, _Captured] = {}
        self.warm: set[str] = set()
        self.uncaptured: set[tuple] = set()
        self._tangents: list[int] | None = None
        self._mutated: set[int] | None = None  # forward inputs the graph writes in place
        self._packed: dict[tuple, tuple[list, int]] = {}  # staging layouts by tangent shapes

    def forward(self, variant: Variant, slot: Slot | None, args: list[Any], layout,
                aliases) -> Any:
        if slot is None:  # nothing to save and nothing to stage: no graph needed
            return variant.forward_graph(*args)
        key = ("forward", slot.index, (slot.generation,), layout.key)
        cap = self.graphs.get(key)
        if cap is not None and self._replay(cap, args, slot):
            return self._outputs(cap, aliases, variant.device)
        staged = _staged_indices(variant)
        if self._mutated is None:
            self._mutated = _mutated_inputs(variant.forward_graph)
        views = slot_views(variant, layout, aliases)
        stage = make_views(aliases[0], variant.device, layout.staging)
        gargs = list(args)
        for i, view in zip(staged, stage, strict=True):
            view.copy_(args[i])
            gargs[i] = view
        out = self._first_runs(variant, slot, key, variant.forward_graph, gargs + views,
                               tuple(zip(staged, stage, strict=True)), len(args), aliases)
        _write_back(args, [(i, gargs[i]) for i in staged if i in self._mutated])
        return out

    def backward(self, variant: Variant, slot: Slot | None, args: list[Any]) -> Any:
        if slot is None:
            return variant.backward_graph(*args)
        if self._tangents is None:
            self._tangents = _tangent_indices(variant)
        tangents = [i for i in self._tangents if isinstance(args[i], torch.Tensor)]
        gargs, generation = self._stage_backward(variant, args, tangents)
        key = ("backward", slot.index, (slot.generation, generation), slot.layout.key,
               tuple(tuple(args[i].shape) for i in tangents))
        cap = self.graphs.get(key)
        if cap is not None and self._replay(cap, gargs, slot):
            return self._outputs(cap, (None, None), variant.device)
        return self._first_runs(variant, slot, key, variant.backward_graph, gargs, (),
                                len(gargs), (None, None))

    def _replay(self, cap: _Captured, args: list[Any], slot: Slot) -> bool:
        """Replay ``cap`` on ``args``; False (and nothing done) if an input moved since capture."""
        if self.options.debug:
            _check_owner(slot)
        for i, ptr in cap.static:
            if args[i].data_ptr() != ptr:
                log.info("an input moved since capture (argument %d); capturing again", i)
                return False
        for i, dst in cap.stage:
            dst.copy_(args[i])
        cap.graph.replay()
        _write_back(args, cap.writeback)
        return True

    def _stage_backward(self, variant: Variant, args: list[Any], tangents: list[int]):
        """Backward arguments with tangents and reloaded (offloaded) groups copied into the
        ring's staging buffer, at addresses that stay put from replay to replay."""
        spans = offloaded_spans(variant, args)
        shapes = tuple((args[i].dtype, tuple(args[i].shape), args[i].stride()) for i in tangents)
        shapes += tuple((dtype, (n,), (1,)) for dtype, n in spans)
        views, generation = self._staging(variant, shapes)
        gargs = list(args)
        for i, view in zip(tangents, views[:len(tangents)], strict=True):
            view.copy_(args[i])
            gargs[i] = view
        flats = views[len(tangents):]
        gargs = reload(variant, gargs, lambda n, dtype, g: flats[g])
        return gargs, generation

    def _staging(self, variant: Variant, shapes: list[tuple]):
        """Views of the ring's backward staging buffer, one per (dtype, shape, stride)."""
        ring = variant.ring
        packed = self._packed.get(shapes)
        if packed is None:
            packed = self._packed[shapes] = pack(shapes, self.options.alignment)
        geometry, offset = packed
        buf = ring.bw_staging
        if buf is None or buf.numel() < offset:
            ring.bw_staging = buf = None
            ring.forget_graphs(None, "backward")
            ring.bw_staging = buf = torch.empty(max(offset, 1), dtype=torch.uint8,
                                                device=variant.device)
            ring.bw_staging_generation += 1
        return (make_views(buf.untyped_storage(), variant.device, geometry),
                ring.bw_staging_generation)

    def _first_runs(self, variant, slot, key, gm, gargs, stage, nargs, aliases) -> Any:
        """Warm up (once per direction), else capture and replay; or run uncaptured."""
        direction = key[0]
        if direction not in self.warm or key in self.uncaptured:
            # Lazy initialisation (cuBLAS handles, autotuning) must not land in a capture.
            self.warm.add(direction)
            return gm(*gargs)
        self._drop_stale(key)
        cap = self._capture(variant, slot, key, gm, gargs, stage, nargs)
        if cap is None:
            return gm(*gargs)
        cap.graph.replay()
        return self._outputs(cap, aliases, variant.device)

    def forget(self, slot_index: int | None, direction: str | None = None) -> None:
        """The slot's arena (or, for backward, the staging buffer) moved: free those graphs."""
        for k in [k for k in self.graphs if (slot_index is None or k[1] == slot_index)
                  and (direction is None or k[0] == direction)]:
            del self.graphs[k]

    def _drop_stale(self, key: tuple) -> None:
        """Graphs of this slot captured before its arena (or the staging buffer) moved can
        never replay again: free them. Keys are (direction, slot, addresses, shape)."""
        for k in [k for k in self.graphs if k[:2] == key[:2] and k[2] != key[2]]:
            del self.graphs[k]

    def _capture(self, variant, slot, key, gm, gargs, stage, nargs) -> _Captured | None:
        from .backend import counters

        direction = key[0]
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        tracker = _NodeTracker(gm)
        pool = shared_pool(variant.device)
        stream = torch.cuda.current_stream(variant.device)
        try:
            with _capturing(graph, pool):
                outs = tracker.run(*gargs)
        except Exception as e:  # noqa: BLE001 - any failure to capture is reported the same way
            node = tracker.current
            # Whatever the failed capture allocated must die now: the interpreter's values and
            # every traceback frame that still points at them.
            tracker.env = {}
            _drop_frames(e)
            del graph
            _recover(variant.device, pool, stream)
            counters["capture_failures"] += 1
            where = f"node {node.name} ({node.target})" if node is not None else "its start"
            root = _root_cause(e)  # what went wrong first, not the capture's own complaint
            first = str(root).strip().splitlines()[0] if str(root).strip() else ""
            msg = (f"fxslots: capturing the {direction} graph of {variant.name} (slot "
                   f"{slot.index}) as a CUDA graph failed at {where}: {type(root).__name__}: "
                   f"{first}. Set options={{'on_capture_failure': 'eager'}} to run this graph "
                   f"without a CUDA graph, or options={{'cudagraphs': False}} for the whole model")
            if self.options.on_capture_failure == "eager":
                warnings.warn(msg, stacklevel=2)
                self.uncaptured.add(key)
                return None
            raise CaptureError(msg) from e
        tracker.env = {}  # the interpreter keeps its output values: this forward's slot views
        counters["captures"] += 1
        log.info("%s: captured %s graph for slot %d (%d captures in all)", variant.name,
                 direction, slot.index, counters["captures"])
        staged = {i for i, _ in stage}
        static = tuple((i, a.data_ptr()) for i, a in enumerate(gargs[:nargs])
                       if isinstance(a, torch.Tensor) and i not in staged)
        staging = variant.ring.bw_staging
        mutated = self._mutated if direction == "forward" else set()
        # Replays stage into the same bytes, but through the arena itself: a view of this
        # forward's alias kept here would hold its slot pending forever.
        fixed = make_views(slot.arena.untyped_storage(), variant.device,
                           [(v.dtype, v.storage_offset(), tuple(v.shape), v.stride())
                            for _, v in stage])
        stage = tuple((i, v) for (i, _), v in zip(stage, fixed, strict=True))
        cap = _Captured(graph, static, stage,
                        _describe_outputs(outs, gargs, slot, direction, staging),
                        tuple((i, dst) for i, dst in stage if i in mutated))
        del outs  # pool outputs die here; their bytes may serve later captures as scratch
        self.graphs[key] = cap
        return cap

    def _outputs(self, cap: _Captured, aliases: tuple[Any, Any],
                 device: torch.device) -> list[Any]:
        result = [o.value for o in cap.outs]
        if len(cap.pool_outs) == 1:
            j = cap.pool_outs[0]
            result[j] = cap.outs[j].value.clone()
        elif cap.pool_outs:
            # One allocation and one multi-tensor copy for all outputs (gradients, mostly),
            # instead of a clone each: the caller owns them, the pool bytes are free again.
            buf = torch.empty(max(cap.pool_nbytes, 1), dtype=torch.uint8, device=device)
            copies = make_views(buf.untyped_storage(), device, None, cap.pool_runs)
            _torch.foreach_copy_(copies, [cap.outs[j].value for j in cap.pool_outs])
            for j, c in zip(cap.pool_outs, copies, strict=True):
                result[j] = c
        for alias, where, outs, runs in ((aliases[0], device, cap.slot_outs, cap.slot_runs),
                                         (aliases[1], _CPU, cap.host_outs, cap.host_runs)):
            if outs:
                for j, v in zip(outs, make_views(alias, where, None, runs), strict=True):
                    result[j] = v
        return result


@contextlib.contextmanager
def _capturing(graph: torch.cuda.CUDAGraph, pool: Any):
    """Capture into ``pool`` the way CUDA graph trees do, so nothing outside this thread's own
    work can spoil it: other threads' CUDA calls are allowed ("thread_local"), the garbage
    collector cannot run finalizers (freeing tensors, destroying graphs) in the middle, and
    cuBLAS takes a fresh workspace from the pool, accounted there as scratch, instead of one a
    warm-up left outside it."""
    enabled = gc.isenabled()
    gc.disable()
    _torch.clear_cublas_workspaces()
    try:
        with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
            yield
    finally:
        _torch.clear_cublas_workspaces()
        if enabled:
            gc.enable()


def _recover(device: torch.device, pool: Any, stream: torch.cuda.Stream) -> None:
    """Undo what a capture that failed inside ``capture_end`` (an invalidated capture: a host
    sync, say) left behind, since ``torch.cuda.graph``'s exit stops at that error: the current
    stream, the allocator's routing into the shared pool and, on torch versions that keep one
    capture flag per RNG generator, that flag. A capture that completes on the pool proves it
    usable again and clears the flag; where some allocator (the pinned host one has no Python
    hook) still counts the pool as recording, the pool is retired: graphs captured in it keep
    working, new ones go to a fresh pool."""
    torch.cuda.set_stream(stream)
    index = _device_index(device)
    _torch.end_allocate_to_pool(index, pool)
    try:
        probe = torch.cuda.CUDAGraph()
        with torch.device(device), torch.cuda.graph(probe, pool=pool):
            torch.zeros(1).add_(1)
        del probe
    except RuntimeError as e:
        torch.cuda.set_stream(stream)
        _torch.end_allocate_to_pool(index, pool)
        log.warning("fxslots: the failed capture left the shared CUDA graph pool unusable (%s); "
                    "later graphs go to a new pool", str(e).strip().splitlines()[0])
        _POOLS.pop(index, None)
        shared_pool(device)  # its keeper is a capture that completes
    torch.cuda.synchronize(device)


def _exception_chain(e: BaseException | None):
    """``e``, then what it was raised from or during, back to the first exception."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def _root_cause(e: BaseException) -> BaseException:
    *_, root = _exception_chain(e)
    return root


def _drop_frames(e: BaseException | None) -> None:
    for x in _exception_chain(e):
        x.__traceback__ = None


def _mutated_inputs(gm: fx.GraphModule) -> set[int]:
    """Indices of the placeholders the graph writes in place."""
    mutated = mutated_placeholders(gm)
    return {i for i, p in enumerate(gm.graph.find_nodes(op="placeholder")) if p in mutated}


def _write_back(args: list[Any], pairs) -> None:
    """A staged input the graph mutated: the caller's tensor must see the mutation."""
    for i, staged in pairs:
        args[i].copy_(staged)


def _staged_indices(variant: Variant) -> list[int]:
    return _placeholder_indices(variant.forward_graph, [v.holds for v in variant.plan.staging])


def _tangent_indices(variant: Variant) -> list[int]:
    names = [p.name for p in variant.backward_graph.graph.find_nodes(op="placeholder")]
    return [i for i, n in enumerate(names) if n.startswith("tangents")]


def _placeholder_indices(gm: fx.GraphModule, names: list[str]) -> list[int]:
    order = [p.name for p in gm.graph.find_nodes(op="placeholder")]
    return [order.index(n) for n in names]


def _slot_alias(gargs: list[Any]) -> Any:
    """This forward's alias of the slot arena (the storage its slot views share)."""
    for a in reversed(gargs):  # slot views come last
        if isinstance(a, torch.Tensor):
            return a.untyped_storage()
    raise AssertionError("fxslots: a slotted graph got no slot view")


def _describe_outputs(outs: Any, gargs: list[Any], slot: Slot, direction: str,
                      staging: torch.Tensor | None) -> list[_Out]:
    """Classify each output: slot views are rebuilt over the next forward's alias; views of
    parameters stay as they are; everything else (pool memory, staged inputs) is cloned."""
    base = slot.arena.data_ptr()
    host = None if slot.host_arena is None else slot.host_arena.data_ptr()
    staged = {base, host, None if staging is None else staging.data_ptr()}
    static = {a.untyped_storage().data_ptr() for a in gargs
              if isinstance(a, torch.Tensor)} - staged
    described = []
    for o in outs:
        if not isinstance(o, torch.Tensor):
            described.append(_Out("const", o))
            continue
        st = o.untyped_storage()
        arena = {base: "slot", host: "host"}.get(st.data_ptr()) if direction == "forward" else None
        if arena is not None:
            # storage_offset, not data_ptr: a zero-size tensor's data_ptr is 0
            described.append(_Out(arena, geometry=(o.dtype, o.storage_offset(),
                                                   tuple(o.shape), o.stride())))
        elif st.data_ptr() in static:
            described.append(_Out("const", o))  # a parameter, or a view of one
        else:
            alias = _torch.storage_alias(st.data_ptr(), o.device, st.nbytes())
            view = torch.empty(0, dtype=o.dtype, device=o.device).set_(
                alias, o.storage_offset(), tuple(o.shape), o.stride())
            described.append(_Out("pool", view))
    return described


def _check_owner(slot: Slot) -> None:
    """Debug mode, before every replay: the slot is held by exactly one live microbatch."""
    if not slot.pending():
        raise CaptureError(
            f"fxslots debug: replaying into slot {slot.index}, which no live microbatch holds "
            f"(last holder: microbatch {slot.microbatch} of {slot.variant})")
