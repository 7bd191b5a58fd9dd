"""Arena memory: device memory that lives as long as a region (arenas, output and staging
buffers), which free slot a forward takes, and debug mode's poison for arenas given back."""

from __future__ import annotations

from typing import Any

import torch


def lasting(nbytes: int, device: torch.device, settle: bool = True) -> torch.Tensor:
    """``nbytes`` of device memory that lives as long as its region (an arena, an output or
    staging buffer). With ``settle``, the caching allocator first gives back the segments it
    keeps free, so this takes a hole in a segment in use or a segment of its own, never part of
    a free one that it would then keep reserved, free remainder and all, for the rest of
    training: heavy's output buffer held 62 MiB that way (H200 run 34a). Settling syncs the
    device, so only allocations made while a variant warms up or grows settle (each capture
    empties the cache then too); a buffer replaced because the caller holds the last one, which
    a loop keeping its results does every step, does not (``staging.OutputBuffer.alias``)."""
    if settle and device.type == "cuda" and not torch.cuda.is_current_stream_capturing():
        torch.cuda.empty_cache()
    return torch.empty(max(nbytes, 1), dtype=torch.uint8, device=device)


def poison(slot: Any) -> None:
    """Debug mode, a released ``ring.Slot``: all-ones bytes read as NaN in every float format."""
    if slot.host_arena is not None and slot.device.type == "cuda":
        # The host is about to write bytes that a reload queued on the GPU may still be reading.
        torch.cuda.current_stream(slot.device).synchronize()
    if slot.host_arena is not None:
        slot.host_arena.fill_(0xFF)
    if slot.arena is not None:
        at = 0  # gradients its backward wrote there are the caller's now: spared
        for start, end in sorted(slot.lent_spans) + [(slot.arena.numel(), slot.arena.numel())]:
            slot.arena[at:start].fill_(0xFF)
            at = max(at, end)


def best_fit(free: list[Any], nbytes: int, host_nbytes: int) -> Any:
    """The smallest free slot whose arenas already hold the forward, else the largest (it grows
    least; growing a slot invalidates its graphs). Largest-first sent every variant of a
    schedule with several in flight through every slot and grew each to the largest: the heavy
    MLP's FFFFBBBB held 5.0 GiB in four arenas against eager's 2.95 (H200 run 24c); best fit
    keeps each variant in a slot of its own size, and captures it there only."""
    fits = [s for s in free if s.nbytes >= nbytes and s.host_nbytes >= host_nbytes]
    if fits:
        return min(fits, key=lambda s: (s.nbytes + s.host_nbytes, s.index))
    return max(free, key=lambda s: (s.nbytes, -s.index))
