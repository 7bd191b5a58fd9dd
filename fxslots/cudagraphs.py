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

import logging
import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from .errors import CaptureError
from .options import Options
from .runtime import Slot, Variant, make_views

log = logging.getLogger(__name__)

_POOLS: dict[int, Any] = {}


def shared_pool(device: torch.device) -> Any:
    """The one memory pool every fxslots graph on ``device`` is captured into."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _POOLS:
        _POOLS[index] = torch.cuda.graph_pool_handle()
    return _POOLS[index]


class _NodeTracker(fx.Interpreter):
    """Runs a graph node by node, remembering the node in flight (to name a capture failure)."""

    current: fx.Node | None = None

    def run_node(self, n: fx.Node) -> Any:
        self.current = n
        return super().run_node(n)


@dataclass
class _Out:
    """How to hand one graph output back after a replay."""

    kind: str  # "const": the same object; "slot": a view over the slot; "pool": clone it
    value: Any = None  # const: the value; pool: a non-owning view of the pool bytes
    geometry: tuple | None = None  # slot: (dtype, element offset, shape, stride)


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    ptrs: tuple[int, ...]  # data_ptr of every tensor input at capture: must hold at replay
    outs: list[_Out]


def _ptrs(args: list[Any]) -> tuple[int, ...]:
    return tuple(a.data_ptr() if isinstance(a, torch.Tensor) else 0 for a in args)


def _shape_key(args: list[Any]) -> tuple:
    return tuple((tuple(a.shape), a.stride()) if isinstance(a, torch.Tensor) else a
                 for a in args)


class GraphExecutor:
    """Replays captured CUDA graphs for one variant; captures on first use of each key."""

    def __init__(self, options: Options):
        self.options = options
        self.graphs: dict[tuple, _Captured] = {}
        self.warm: set[str] = set()
        self.uncaptured: set[tuple] = set()
        self._staged_inputs: list[int] | None = None
        self._tangents: list[int] | None = None

    # forward

    def forward(self, variant: Variant, slot: Slot | None, args: list[Any], views: list[Any],
                staged: list[Any]) -> Any:
        if slot is None:  # nothing to save and nothing to stage: no graph needed
            return variant.forward_graph(*args)
        if self._staged_inputs is None:
            self._staged_inputs = _placeholder_indices(variant.forward_graph,
                                                       [v.holds for v in variant.plan.staging])
        gargs = list(args)
        for i, view in zip(self._staged_inputs, staged, strict=True):
            view.copy_(args[i])
            gargs[i] = view
        gargs += views
        key = ("forward", slot.index, slot.generation, _shape_key(gargs))
        return self._run(variant, slot, key, variant.forward_graph, gargs)

    # backward

    def backward(self, variant: Variant, slot: Slot | None, args: list[Any]) -> Any:
        if slot is None:
            return variant.backward_graph(*args)
        if self._tangents is None:
            names = [p.name for p in variant.backward_graph.graph.find_nodes(op="placeholder")]
            self._tangents = [i for i, n in enumerate(names) if n.startswith("tangents")]
        gargs = list(args)
        tangents = [(i, args[i]) for i in self._tangents if isinstance(args[i], torch.Tensor)]
        staging, generation = self._staging(variant, [t for _, t in tangents])
        for (i, t), view in zip(tangents, staging, strict=True):
            view.copy_(t)
            gargs[i] = view
        key = ("backward", slot.index, slot.generation, generation, _shape_key(gargs))
        return self._run(variant, slot, key, variant.backward_graph, gargs)

    def _staging(self, variant: Variant, tangents: list[torch.Tensor]):
        """Views of the ring's backward staging buffer, one per tangent. Backward replays run
        one at a time and consume their tangents, so one buffer serves every variant and slot."""
        ring = variant.ring
        geometry, offset = [], 0
        for t in tangents:
            span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))
            geometry.append((t.dtype, offset // t.element_size(), tuple(t.shape), t.stride()))
            offset += -(-span * t.element_size() // self.options.alignment) * self.options.alignment
        buf = getattr(ring, "bw_staging", None)
        if buf is None or buf.numel() < offset:
            ring.bw_staging = buf = torch.empty(max(offset, 1), dtype=torch.uint8,
                                                device=variant.device)
            ring.bw_staging_generation = getattr(ring, "bw_staging_generation", 0) + 1
        return make_views(buf.untyped_storage(), variant.device, geometry), \
            ring.bw_staging_generation

    # both directions

    def _run(self, variant: Variant, slot: Slot, key: tuple, gm: fx.GraphModule,
             gargs: list[Any]) -> Any:
        direction = key[0]
        if direction not in self.warm or key in self.uncaptured:
            # Warm-up runs uncaptured once per direction: lazy initialisation (cuBLAS handles,
            # autotuning) must not land inside a capture.
            self.warm.add(direction)
            return gm(*gargs)
        cap = self.graphs.get(key)
        if cap is None or cap.ptrs != _ptrs(gargs):
            if cap is not None:
                log.info("%s %s slot %d: an input moved; capturing again", variant.name,
                         direction, slot.index)
            cap = self._capture(variant, slot, key, gm, gargs)
            if cap is None:
                return gm(*gargs)
        if self.options.debug:
            _check_owner(variant, slot, gargs)
        cap.graph.replay()
        return self._outputs(cap, gargs)

    def _capture(self, variant, slot, key, gm, gargs) -> _Captured | None:
        from .backend import counters

        direction = key[0]
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        tracker = _NodeTracker(gm)
        try:
            with torch.cuda.graph(graph, pool=shared_pool(variant.device)):
                outs = tracker.run(*gargs)
        except Exception as e:  # noqa: BLE001 - any failure to capture is reported the same way
            node = tracker.current
            del graph
            torch.cuda.synchronize()
            counters["capture_failures"] += 1
            where = f"node {node.name} ({node.target})" if node is not None else "its start"
            msg = (f"fxslots: capturing the {direction} graph of {variant.name} (slot "
                   f"{slot.index}) as a CUDA graph failed at {where}: {type(e).__name__}: "
                   f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}. Set "
                   f"options={{'on_capture_failure': 'eager'}} to run this graph without a CUDA "
                   f"graph, or options={{'cudagraphs': False}} for the whole model")
            if self.options.on_capture_failure == "eager":
                warnings.warn(msg, stacklevel=2)
                self.uncaptured.add(key)
                return None
            raise CaptureError(msg) from e
        counters["captures"] += 1
        log.info("%s: captured %s graph for slot %d (%d captures in all)", variant.name,
                 direction, slot.index, counters["captures"])
        staging = getattr(variant.ring, "bw_staging", None)
        cap = _Captured(graph, _ptrs(gargs),
                        _describe_outputs(outs, gargs, slot, direction, staging))
        del outs  # pool outputs die here; their bytes may serve later captures as scratch
        self.graphs[key] = cap
        return cap

    def _outputs(self, cap: _Captured, gargs: list[Any]) -> list[Any]:
        alias = None
        result = []
        for o in cap.outs:
            if o.kind == "const":
                result.append(o.value)
            elif o.kind == "pool":
                result.append(o.value.clone())
            else:
                if alias is None:
                    alias = _slot_alias(gargs)
                dtype, off, shape, stride = o.geometry
                result.append(torch.empty(0, dtype=dtype, device=alias.device).set_(
                    alias, off, shape, stride))
        return result


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
    from . import _torch

    base = slot.arena.data_ptr()
    staged = {base, None if staging is None else staging.data_ptr()}
    static = {a.untyped_storage().data_ptr() for a in gargs
              if isinstance(a, torch.Tensor)} - staged
    described = []
    for o in outs:
        if not isinstance(o, torch.Tensor):
            described.append(_Out("const", o))
            continue
        st = o.untyped_storage()
        if direction == "forward" and st.data_ptr() == base:
            off = o.data_ptr() - base
            assert off % o.element_size() == 0, "fxslots: a slot output is misaligned"
            described.append(_Out("slot", geometry=(o.dtype, off // o.element_size(),
                                                    tuple(o.shape), o.stride())))
        elif st.data_ptr() in static:
            described.append(_Out("const", o))  # a parameter, or a view of one
        else:
            alias = _torch.storage_alias(st.data_ptr(), o.device, st.nbytes())
            view = torch.empty(0, dtype=o.dtype, device=o.device).set_(
                alias, o.storage_offset(), tuple(o.shape), o.stride())
            described.append(_Out("pool", view))
    return described


def _check_owner(variant: Variant, slot: Slot, gargs: list[Any]) -> None:
    """Debug mode: the slot about to be replayed into belongs to this microbatch alone."""
    views = [a for a in gargs if isinstance(a, torch.Tensor)
             and a.untyped_storage().data_ptr() == slot.arena.data_ptr()]
    if views and not slot.owns(views[-1]):
        raise CaptureError(
            f"fxslots debug: slot {slot.index} of {variant.ring.name} is owned by microbatch "
            f"{slot.microbatch}, not the one replaying now")
