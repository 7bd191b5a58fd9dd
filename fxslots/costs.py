"""A rough time for each node of a graph, and the device figures it is computed from.

Offloading needs to know how long compute runs between two points of a graph, to hide copies
under it. A node takes the larger of its arithmetic time (FLOPs from PyTorch's flop counter
over the peak rate) and its memory time (bytes read and written over the memory bandwidth);
views cost nothing. Coarse, but the ratios between nodes are what placement uses.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch.utils.flop_counter import flop_registry

from . import _torch
from .ops import runs_as_call

log = logging.getLogger(__name__)
_LINK: dict[int, float] = {}  # measured host-link bytes/s per CUDA device


@dataclass(frozen=True)
class DeviceCaps:
    """Peak rates of one device, in per-second units."""

    flops_16: float  # bf16/fp16 matrix FLOP/s
    flops_32: float  # fp32 FLOP/s
    hbm: float  # device memory bytes/s
    link: float  # host <-> device bytes/s, each way, pinned
    # What one copy costs besides its bytes: its node in the captured graph (a host<->device
    # copy node makes the graph's launch take about 2 us more, against about 0.005 us for a
    # kernel node) and the copy engine's setup (1.5 MiB copies ran at 87% of the link).
    # H200 run 21.
    copy_latency: float = 0.0
    # The least time any kernel takes in a captured graph: its launch gap and ramp. Without
    # it the roofline put llama-small's forward at 0.65 ms and backward at 1.5 ms against 2.2
    # and 3.6 measured (1360 kernels a step, 3.9 us on average); with 4 us, 2.0 and 3.8 (H200
    # run 21), so offload placement hides copies under the compute that really runs.
    kernel_floor: float = 0.0
    # How much longer than its estimate a device-to-host copy is planned to take where the
    # forward joins it: joins placed where the estimate said the copy was just done stalled
    # compute in 13-65 us bits (llama-small, auto: 0.58 ms a step of copy time with no kernel
    # beside it). Later joins only hold a group's device bytes a little longer. H200 run 21l:
    # llama-small "all" 16.06 -> 15.44 ms, "auto" 6.04 -> 5.95; the same slack on the
    # backward's reloads (run 21k) held reloaded bytes longer and was slower, so it is not
    # applied there.
    join_slack: float = 1.0
    # Compute time over which joins of one side stream are made one: each join costs the
    # compute stream 1-1.7 us in a replay even when its copy is long done, where a copy forked
    # beside it costs 0.2-0.6 (H200 run 28e, ``benchmarks/copy_contention.py``: 36 joined
    # copies 1.041x none, 36 joined at the end 1.017x; 144: 1.226x, 1.035x). Copies on one
    # stream end in order, so one wait joins every copy before it; the copies a merged join
    # holds longer are those done within ``join_every``: about ``link * join_every`` bytes
    # (16 MB at 54 GB/s and 300 us) plus the run's first, and never past the offload
    # window (a copy with no room beside them joins them first). llama-small,
    # auto (86 MiB a forward) against none, paired (run 28f): 1.064x with a join per copy,
    # 1.049x merged over 100 us, 1.042x over 300 us.
    join_every: float = 0.0
    # Inductor compiles the graphs (kernels="inductor"): an op it generates fuses with the
    # generated ops around it into one kernel, which reads its inputs and writes its results
    # once, so a value passed between them costs no bytes and only a kernel's end pays the
    # floor. Charging each ATen node its own bytes put heavy's forward at about twice what ran,
    # and auto moved 1.54x what the link carried (H100 run 52a).
    fused: bool = False

    def transfer_seconds(self, nbytes: int) -> float:
        return self.copy_latency + nbytes / self.link

    def join_seconds(self, nbytes: int) -> float:
        """The time to plan for before the compute stream joins a copy of ``nbytes``."""
        return self.join_slack * self.transfer_seconds(nbytes)

    def worth_a_copy(self, nbytes: int) -> bool:
        """Whether moving ``nbytes`` takes longer than the copy's fixed cost: smaller groups
        free too little to pay for their copies (llama-small's 4-byte RNG offsets, 4 KiB
        RMSNorm scales)."""
        return nbytes >= self.copy_latency * self.link


def caps_for(device: torch.device, link: float | None = None, fused: bool = False
             ) -> DeviceCaps:
    """H200-class figures on CUDA (measured by the project: 788 TFLOP/s bf16 matrix products,
    4.3 TB/s copies, 8 us a copy besides its bytes, 4 us at least a kernel) with the host link
    measured once per device, unless ``link`` is given; nominal figures on CPU, where
    offloading is a plain copy with no fixed cost. ``fused``: Inductor compiles the graphs,
    fusing chains of small ops into one kernel (``DeviceCaps.fused``). Joins of a side stream
    are merged over ``join_every`` (see it)."""
    if device.type != "cuda":
        return DeviceCaps(1e11, 5e10, 2e10, link or 1e10, fused=fused)
    return DeviceCaps(7.0e14, 5.0e13, 4.0e12, link or measured_link(device), copy_latency=8e-6,
                      kernel_floor=4e-6, join_slack=1.5, join_every=300e-6, fused=fused)


# Bytes/s no host link reaches (NVLink-C2C is 450 GB/s each way): a measurement above it timed
# something other than copies.
_LINK_CEILING = 1e12
_LINK_NOMINAL = 25e9  # PCIe 4 x16, pinned, each way
_LINK_WINDOWS = 5


def measured_link(device: torch.device) -> float:
    """Pinned host <-> device bytes/s: the slower way's best of ``_LINK_WINDOWS`` 64 MiB copies
    each way, timed once per device on CUDA events.

    Both ways, since the forward's copies run to the host and the backward's to the device.
    The best of several, since the compile that asks first may share the link or the device
    with other work: one timed window read 43.9 and 35.8 GB/s in two processes on one H100
    (run 52a). Real tensors even inside a compile: under its FakeTensorMode the copies were
    fake, took no time, and the link came out unbounded (H200 run 15: ``offload="auto"`` then
    moved 896 of 960 MiB, 3.9x the step time of no offload)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _LINK:
        with _torch.real_tensors(), torch.cuda.device(index):
            host = torch.empty(64 * 2**20, dtype=torch.uint8, device="cpu", pin_memory=True)
            dev = torch.empty_like(host, device=f"cuda:{index}")
            ways = {"to the device": _best_rate(dev, host), "to the host": _best_rate(host, dev)}
            log.info("fxslots: host link of cuda:%d, best of %d copies: %s", index, _LINK_WINDOWS,
                     ", ".join(f"{way} {rate / 1e9:.1f} GB/s" for way, rate in ways.items()))
            _LINK[index] = plausible_link(min(ways.values()))
    return _LINK[index]


def _best_rate(dst: torch.Tensor, src: torch.Tensor) -> float:
    """Bytes/s of the fastest of ``_LINK_WINDOWS`` copies of ``src`` into ``dst``."""
    return src.nbytes / max(min(copy_seconds(dst, src, _LINK_WINDOWS)), 1e-9)


def copy_seconds(dst: torch.Tensor, src: torch.Tensor, windows: int) -> list[float]:
    """The device time of each of ``windows`` copies of ``src`` into ``dst`` (CUDA events),
    after one untimed (first touch)."""
    dst.copy_(src, non_blocking=True)
    seconds = []
    for _ in range(windows):
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        dst.copy_(src, non_blocking=True)
        end.record()
        end.synchronize()
        seconds.append(start.elapsed_time(end) / 1e3)
    return seconds


def plausible_link(measured: float) -> float:
    """``measured`` bytes/s, or a nominal figure (logged) when no real link could give it."""
    if 0 < measured <= _LINK_CEILING:
        return measured
    log.warning("fxslots: the host link measured %.3g B/s, which no link reaches; offload "
                "placement assumes %.3g B/s (set options={'link_bandwidth': ...} to give it)",
                measured, _LINK_NOMINAL)
    return _LINK_NOMINAL


def node_seconds(node: fx.Node, caps: DeviceCaps, fusion: "Fusion | None" = None) -> float:
    """``fusion``: how Inductor fuses the graph (``Fusion.of``): a node then reads only what
    its kernel loads first, and writes and pays the floor only where the kernel ends."""
    if node.op != "call_function" or _torch.returns_view(node.target):
        return 0.0
    val = node.meta.get("val")
    out = [v for v in (val if isinstance(val, (list, tuple)) else [val])
           if isinstance(v, torch.Tensor)]
    ins = [a.meta.get("val") for a in (fusion.loads[node] if fusion and node in fusion.kernel
                                       else node.all_input_nodes)]
    ends = fusion is None or fusion.ends(node)
    nbytes = sum(_nbytes(t) for t in ins + (out if ends else []) if isinstance(t, torch.Tensor))
    flops = _flops(node)
    dtype = out[0].dtype if out else torch.float32
    rate = caps.flops_16 if dtype in (torch.bfloat16, torch.float16) else caps.flops_32
    floor = (caps.kernel_floor if isinstance(node.target, _torch.OpOverload) and out and ends
             else 0.0)
    return max(flops / rate, nbytes / caps.hbm, floor)


def graph_seconds(gm: fx.GraphModule, caps: DeviceCaps) -> list[tuple[fx.Node, float]]:
    """Each node with its estimated time, in graph order."""
    fusion = Fusion.of(gm) if caps.fused else None
    return [(n, node_seconds(n, caps, fusion)) for n in gm.graph.nodes]


@dataclass(frozen=True)
class Fusion:
    """Inductor's kernels, roughly: the ops it generates (not ATen calls, not views) joined
    by the values that stay inside a kernel (every reader generated). ``kernel`` maps each
    generated node to its kernel's first node; ``loads`` each generated node to the inputs it
    reads from memory (a kernel loads an input once; an ATen call loads all of its own);
    ``stored`` holds the generated nodes whose value leaves the kernel."""

    kernel: dict[fx.Node, fx.Node]
    loads: dict[fx.Node, tuple[fx.Node, ...]]
    stored: frozenset

    def ends(self, node: fx.Node) -> bool:
        return node not in self.kernel or node in self.stored

    @classmethod
    def of(cls, gm: fx.GraphModule) -> "Fusion":
        gen = [n for n in gm.graph.nodes if n.op == "call_function"
               and isinstance(n.target, _torch.OpOverload)
               and not _torch.returns_view(n.target) and not runs_as_call(n.target)]
        generated = set(gen)
        stored = frozenset(n for n in gen if _leaves(n, generated))
        parent = {n: n for n in gen}

        def find(n: fx.Node) -> fx.Node:
            while parent[n] is not n:
                parent[n] = n = parent[parent[n]]
            return n

        order = {n: i for i, n in enumerate(gen)}
        for n in gen:
            for r in _readers(n):
                if n not in stored and r in parent:
                    a, b = sorted((find(n), find(r)), key=order.__getitem__)
                    parent[b] = a  # a kernel is named by its first node
        kernel = {n: find(n) for n in gen}
        loads, seen = {}, set()
        for n in kernel:  # graph order
            ins = {_base(a): a for a in n.all_input_nodes}
            loads[n] = tuple(a for b, a in ins.items()
                             if kernel.get(b) is not kernel[n] and (kernel[n], b) not in seen)
            seen.update((kernel[n], b) for b in ins)
        return cls(kernel, loads, stored)


def _base(node: fx.Node) -> fx.Node:
    """The node whose bytes ``node`` views (itself when it is no view)."""
    while (node.op == "call_function" and _torch.returns_view(node.target) and node.args
           and isinstance(node.args[0], fx.Node)):
        node = node.args[0]
    return node


def _readers(node: fx.Node) -> list[fx.Node]:
    """The nodes that read ``node``'s value, through views."""
    out, todo = [], list(node.users)
    while todo:
        r = todo.pop()
        if r.op == "call_function" and _torch.returns_view(r.target):
            todo.extend(r.users)
        else:
            out.append(r)
    return out


def _leaves(node: fx.Node, gen: set) -> bool:
    """Whether a generated node's value leaves its kernel: it writes an input, a reader is
    not generated (an ATen call, the output, a side-stream copy), or nothing reads it."""
    readers = _readers(node)
    return (_torch.op_schema(node.target).is_mutable or not readers
            or any(r not in gen for r in readers))


def value_bytes(node: fx.Node) -> int:
    """Bytes of a node's tensor value at its shape hints (0 when it is no tensor)."""
    v = node.meta.get("val")
    return _nbytes(v) if isinstance(v, torch.Tensor) else 0


def allocated_bytes(node: fx.Node) -> int:
    """Bytes a node's value takes (all of them for an op with several outputs), at shape
    hints: 0 for no tensor."""
    v = node.meta.get("val")
    vals = v if isinstance(v, (tuple, list)) else (v,)
    return sum(_nbytes(t) for t in vals if isinstance(t, torch.Tensor))


def _nbytes(t: torch.Tensor) -> int:
    n = t.element_size()
    for s in t.shape:
        n *= _torch.size_hint(s)
    return n


def _flops(node: fx.Node) -> float:
    packet = getattr(node.target, "overloadpacket", None)
    formula = flop_registry.get(packet)
    if formula is None:
        return 0.0
    try:
        args = [_meta(a) for a in node.args]
        kwargs = {k: _meta(v) for k, v in node.kwargs.items() if k != "out"}
        return float(formula(*args, **kwargs, out_val=_meta(node)))
    except Exception:  # noqa: BLE001 - an estimate: an op the formula cannot read costs bytes only
        return 0.0


def _meta(x: Any) -> Any:
    """A meta tensor with the (hinted) shape of a node's value; other arguments as they are."""
    v = x.meta.get("val") if isinstance(x, fx.Node) else x
    if isinstance(v, torch.Tensor):
        return torch.empty([_torch.size_hint(s) for s in v.shape], dtype=v.dtype, device="meta")
    if isinstance(v, (list, tuple)):
        return type(v)(_meta(e) for e in v)
    return _torch.size_hint(v) if isinstance(v, torch.SymInt) else v
