"""What the offload policies weigh: the sizes a graph is compiled for, a group's bytes at them,
and which groups can move to the host arena at all (``fxslots.offloading`` decides)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable, Mapping

import sympy
import torch
import torch.fx as fx

from . import _torch
from .geometry import evaluate, symbol_values
from .passes.plan import copied_whole
from .printing import dtype_str, mib
from .schemas import SavedSet, SavedTensor, Source, StorageGroup


def hints_of(fw: fx.GraphModule) -> dict:
    """Each shape symbol of the forward's inputs at the value it was compiled for."""
    env = {}
    for p in fw.graph.find_nodes(op="placeholder"):
        v = p.meta.get("val")
        for x in (v.shape if isinstance(v, torch.Tensor) else [v]):
            sym = _torch.symbol_of(x)
            if sym is not None:
                env[sym] = sympy.Integer(_torch.size_hint(x))
    return env


def bytes_at(saved: SavedSet, nbytes: sympy.Expr, hints: dict) -> int:
    """``nbytes`` at the sizes being compiled (``hints``); a symbol without a hint at the
    largest value its range allows (the safe side for a budget)."""
    e = sympy.sympify(nbytes).xreplace(hints)
    if not e.free_symbols:
        return int(e)
    env = next(symbol_values(saved.symbol_ranges, e.free_symbols, points=("high",)), None)
    return 0 if env is None else evaluate(e, env)


def sizes_text(hints: dict, symbols: Iterable[sympy.Symbol]) -> str:
    """``"s0=512, s1=8"``: the hinted ones of ``symbols`` at their values (a reason names the
    sizes it was decided at)."""
    return ", ".join(f"{s}={hints[s]}" for s in sorted(set(symbols) & set(hints), key=str))


def why_not_offloadable(saved: SavedSet, g: StorageGroup) -> str | None:
    """Why group ``g`` cannot go to the host arena, or None when it can: it must be slotted, of
    one dtype (reloaded as one span) and moved by one dense copy (``copied_whole``)."""
    if g.source is not Source.INTERMEDIATE:
        return "it has no slot"
    members = [saved.tensor(m) for m in g.members]
    dtypes = sorted({dtype_str(m.dtype) for m in members})
    if len(dtypes) > 1:
        return (f"cannot be offloaded: its tensors are of {len(dtypes)} dtypes "
                f"({', '.join(dtypes)}), and a group is reloaded as one span of one dtype")
    if not copied_whole(g, members, saved.symbol_ranges):
        return ("cannot be offloaded: no one dense tensor covers its bytes (a copy to host "
                "memory that is not one dense block goes through a pageable temporary, "
                "synchronous and refused in a CUDA graph capture)")
    return None


def offloadable(saved: SavedSet) -> list[StorageGroup]:
    """The groups that may be offloaded (``why_not_offloadable`` finds no reason)."""
    return [g for g in saved.groups if why_not_offloadable(saved, g) is None]


def over_budget(saved: SavedSet, budget: int, stay: Mapping[int, sympy.Expr],
                hints: dict) -> str | None:
    """Why ``budget`` is not met by the groups that ``stay`` on the device (group -> what it
    holds of the arena): the bytes and why they cannot move; None where it is met (a plan
    over its budget must not pass silently)."""
    device = sum(bytes_at(saved, e, hints) for e in stay.values())
    if device <= budget:
        return None
    groups, whys = {g.id: g for g in saved.groups}, {}
    for i in stay:
        whys.setdefault(str(why_not_offloadable(saved, groups[i])), []).append(f"g{i}")
    at = sizes_text(hints, {s for e in stay.values() for s in e.free_symbols})
    return (f"fxslots: offload={budget} (a budget of device saved bytes per slot) is not met: "
            f"{mib(device)} stay on the device"
            + (f" at {at} (more at larger shapes)" if at else "") + ": "
            + "; ".join(f"{', '.join(ids)} {why}" for why, ids in whys.items()))


def growing(saved: SavedSet, decisions: Mapping[int, tuple[bool, str]],
            kept: Mapping[int, sympy.Expr], budget: bool) -> tuple[set, list[int], str]:
    """The symbols whose growth undoes an offload choice, the groups whose reasons say it is
    bound to them, and what a larger shape would do: auto's, of the groups it moves (more
    bytes under compute that grows less); a budget's, of what stays on the device (``kept``:
    what each group holds of it), all it decided."""
    if budget:
        stay = [e for i, e in kept.items() if not decisions[i][0]]
        return ({s for e in stay for s in e.free_symbols}, list(kept),
                "the device may hold more than the budget")
    chosen = [g for g in saved.groups if decisions.get(g.id, (False, ""))[0]]
    return ({s for g in chosen for s in g.nbytes.free_symbols}, [g.id for g in chosen],
            "its copies may not hide")


def at_sizes(t: SavedTensor, hints: dict) -> SavedTensor:
    """``t`` with the symbols of ``hints`` set to their values."""
    def value(e: Any) -> Any:
        return sympy.sympify(e).xreplace(hints)
    return replace(t, shape=tuple(map(value, t.shape)), stride=tuple(map(value, t.stride)),
                   storage_offset=value(t.storage_offset))
