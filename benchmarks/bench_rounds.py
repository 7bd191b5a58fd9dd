"""Rounds: the speed part run several times over, each backend in another place of the order.

At sizes where every backend runs at the GPU's power limit (the heavy MLP on the H200: 700 W,
SM clock 1.6-1.7 GHz), a case's kernels run slower the warmer the GPU is when it starts, so the
case that runs last in a (model, schedule) group reads slower than it is (H200 run 24c-d: the
heavy model's FFFFBBBB, fxslots run after eager, read 1.07x in both runs). With ``--rounds N``
each round rotates every group's backend order by one, and a case's repetitions from all rounds
are one sample: its median and spread are over all of them.
"""

from __future__ import annotations

from itertools import groupby
from typing import Any

from bench_work import spread


def interleave(specs: list[dict], rounds: int) -> list[dict]:
    """``rounds`` copies of ``specs``; in round ``r`` each (model, schedule) group's cases
    start at its ``r``-th (groups stay in their order; every spec is tagged with its round)."""
    groups = [list(g) for _, g in groupby(specs, key=lambda c: (c["model"], c["schedule"]))]
    out = []
    for r in range(rounds):
        for g in groups:
            k = r % len(g)
            out += [dict(c, round=r) for c in g[k:] + g[:k]]
    return out


def merge(rows: list[dict]) -> list[dict]:
    """One row per (model, schedule, case), in first-seen order: the first round's row with
    ``ms_per_step`` and its spread over every round's repetitions, each round's median in
    ``round_medians``, and the first error any round met."""
    merged: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        key = (row["model"], row["schedule"], row["case"])
        first = merged.setdefault(key, dict(row, round_medians=[], _reps=[]))
        if row.get("ms_per_step_reps"):
            first["_reps"] += row["ms_per_step_reps"]
            first["round_medians"].append(row["ms_per_step"])
        if row.get("error") and not first.get("error"):
            first["error"] = row["error"]
    for row in merged.values():
        reps = row.pop("_reps")
        if reps:
            row.update(spread(reps, "ms_per_step"))
        row["rounds"] = len(row["round_medians"])
    return list(merged.values())
