"""The operations offloading puts into graphs: copies on side streams, and the waits that join
them. FX call targets (plain Python functions), captured into CUDA graphs like any op.

Forward: ``offload(value, host)`` forks a device-to-host stream off the compute stream and
copies there; ``offload_wait(value, event)`` joins it, after which the value's device bytes
are free for later ops (the graph frees a value at its last use: this wait). Backward:
``reload(*members)`` allocates device memory on the compute stream, forks a host-to-device
stream that copies the group's host span into it, and ``reload_wait(handle)`` joins it at or
before the first use and hands back the members as views of the reloaded bytes. Copies on one
side stream end in order, so one wait can join several: the others say ``wait=False``. Inside a
capture, the forks and joins become edges of the CUDA graph. On CPU the copies run at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .geometry import span_elements

_STREAMS: dict[tuple[int, str], Any] = {}


def side_stream(device: torch.device, direction: str) -> Any:
    """One side stream per device and direction ("d2h", "h2d"), made on first use."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    stream = _STREAMS.get((index, direction))
    if stream is None:
        stream = _STREAMS[(index, direction)] = torch.cuda.Stream(device=index)
    return stream


def offload(host: torch.Tensor, value: torch.Tensor) -> Any:
    """Copy ``value`` into ``host`` (pinned) on the device-to-host stream; the join event."""
    if value.device.type != "cuda":
        host.copy_(value)
        return None
    compute = torch.cuda.current_stream(value.device)
    side = side_stream(value.device, "d2h")
    side.wait_stream(compute)  # the producer has written it
    with torch.cuda.stream(side):
        host.copy_(value, non_blocking=True)
    return side.record_event()


def offload_wait(value: torch.Tensor, event: Any, wait: bool = True) -> None:
    """The compute stream waits for the copy of ``value``: its bytes may be reused after.
    ``wait=False``: the wait for a later copy on the stream, just before, joined this one."""
    if wait and event is not None:
        torch.cuda.current_stream(value.device).wait_event(event)


@dataclass
class Reload:
    members: list[torch.Tensor]  # device views of the reloaded span, in the order given
    event: Any
    span: torch.Tensor | None = None  # the one device buffer the members view


def reload(device: torch.device, *members: torch.Tensor) -> Reload:
    """Bring one offloaded group (``members``, views of one host storage, one dtype) back to
    ``device`` in one piece, its members rebuilt as views so aliases, strides and offsets
    survive; the copy runs on the host-to-device stream."""
    lo = min(m.storage_offset() for m in members)
    hi = max(m.storage_offset() + span_elements(m.shape, m.stride()) for m in members)
    buf = torch.empty(hi - lo, dtype=members[0].dtype, device=device)
    src = members[0].as_strided((hi - lo,), (1,), lo)
    views = [buf.as_strided(m.shape, m.stride(), m.storage_offset() - lo) for m in members]
    if device.type != "cuda":
        buf.copy_(src)
        return Reload(views, None, buf)
    compute = torch.cuda.current_stream(device)
    side = side_stream(device, "h2d")
    side.wait_stream(compute)  # the bytes ``buf`` reuses are no longer read
    with torch.cuda.stream(side):
        buf.copy_(src, non_blocking=True)
    return Reload(views, side.record_event(), buf)


def reload_wait(handle: Reload, wait: bool = True) -> list[torch.Tensor]:
    """The reloaded members, once the compute stream has joined their copy (``wait=False``:
    the wait for a later reload on the stream, just before, joined it)."""
    if wait and handle.event is not None:
        torch.cuda.current_stream(handle.members[0].device).wait_event(handle.event)
    return handle.members
