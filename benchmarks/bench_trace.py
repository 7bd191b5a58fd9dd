"""How much of a profile's host<->device copy time overlaps compute, read from a Chrome trace.

``torch.profiler`` writes device activity as Chrome trace events: kernels (``"cat": "kernel"``)
and copies (``"cat": "gpu_memcpy"``, named ``Memcpy DtoH (Device -> Pinned)`` and so on), each
with a start ``ts`` and a duration ``dur`` in microseconds and its CUDA ``stream`` in ``args``.
A copy overlaps compute for the part of its interval that some kernel on *another* stream covers
(a kernel on its own stream cannot run at the same time). Pure functions: tested on CPU.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

Interval = tuple[float, float]


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """The union of intervals as sorted, disjoint intervals."""
    out: list[list[float]] = []
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def covered(interval: Interval, union: list[Interval]) -> float:
    """How much of ``interval`` the sorted disjoint ``union`` covers."""
    a, b = interval
    return sum(max(0.0, min(b, y) - max(a, x)) for x, y in union if x < b and y > a)


def device_events(trace: dict[str, Any]) -> tuple[list[dict], list[dict]]:
    """(kernels, copies): the trace's kernel events and its host<->device memcpy events."""
    kernels, copies = [], []
    for e in trace.get("traceEvents", []):
        cat = str(e.get("cat", "")).lower()
        if "dur" not in e or "ts" not in e:
            continue
        if cat == "kernel":
            kernels.append(e)
        elif "memcpy" in cat and direction(e) is not None:
            copies.append(e)
    return kernels, copies


def direction(event: dict[str, Any]) -> str | None:
    """"d2h", "h2d" or None (a device-to-device copy, or not a copy)."""
    name = str(event.get("name", ""))
    if "DtoH" in name:
        return "d2h"
    if "HtoD" in name:
        return "h2d"
    return None


def _stream(e: dict[str, Any]) -> Any:
    return (e.get("args") or {}).get("stream", e.get("tid"))


def _span(e: dict[str, Any]) -> Interval:
    return float(e["ts"]), float(e["ts"]) + float(e["dur"])


def copy_overlap(trace: dict[str, Any]) -> dict[str, Any]:
    """Per direction: copy microseconds, the part overlapping kernels on other streams, bytes."""
    kernels, copies = device_events(trace)
    unions: dict[Any, list[Interval]] = {}
    out: dict[str, Any] = {}
    for c in copies:
        s = _stream(c)
        if s not in unions:
            unions[s] = merge(_span(k) for k in kernels if _stream(k) != s)
        d = out.setdefault(direction(c), {"copy_us": 0.0, "overlap_us": 0.0, "bytes": 0,
                                          "copies": 0})
        d["copy_us"] += float(c["dur"])
        d["overlap_us"] += covered(_span(c), unions[s])
        d["bytes"] += int((c.get("args") or {}).get("bytes", 0) or 0)
        d["copies"] += 1
    total = sum(d["copy_us"] for d in out.values())
    out["overlap_fraction"] = (sum(d["overlap_us"] for d in out.values()) / total
                               if total else None)
    return out


def copy_overlap_file(path: str) -> dict[str, Any]:
    with open(path) as fh:
        return copy_overlap(json.load(fh))
