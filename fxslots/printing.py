"""Readable, stable printouts of rewritten graphs and arena plans (what golden tests pin)."""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from . import _torch
from .geometry import itemsize
from .schemas import SLOT_META
from .schemas import ArenaPlan, SavedSet, SlotView, Write

_DTYPES = {
    torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
    torch.int64: "i64", torch.int32: "i32", torch.int8: "i8", torch.uint8: "u8",
    torch.bool: "b8",
}


def dtype_str(dtype: torch.dtype) -> str:
    return _DTYPES.get(dtype, str(dtype).replace("torch.", ""))


def mib(n: int) -> str:
    return f"{n} B" if n < 2**20 else f"{n / 2**20:.2f} MiB"


def shape_str(dtype: torch.dtype, shape) -> str:
    return f"{dtype_str(dtype)}[{', '.join(str(s) for s in shape)}]"


def _target(node: fx.Node) -> str:
    t = node.target
    if isinstance(t, _torch.OpOverload):
        name = str(t)
        return name[: -len(".default")] if name.endswith(".default") else name
    return getattr(t, "__name__", str(t))


def _arg(a: Any) -> str:
    if isinstance(a, fx.Node):
        return a.name
    if isinstance(a, (list, tuple)):
        inner = ", ".join(_arg(x) for x in a)
        return f"[{inner}]"
    if isinstance(a, torch.dtype):
        return dtype_str(a)
    return repr(a) if isinstance(a, str) else str(a)


def _annotation(node: fx.Node) -> str:
    meta = node.meta.get(SLOT_META)
    if isinstance(meta, SlotView):
        nbytes = meta.storage_offset * itemsize(meta.dtype)
        arena = "host arena" if meta.host else "slot"
        return shape_str(meta.dtype, meta.shape) + f" @ {arena} byte {nbytes}"
    v = node.meta.get("val")
    if isinstance(v, torch.Tensor):
        return shape_str(v.dtype, v.shape)
    if isinstance(v, torch.SymInt):
        return "Sym(" + str(v) + ")"
    return ""


def format_graph(gm: fx.GraphModule, name: str = "forward") -> str:
    """One line per node: ``name: type = target(args)  # what fxslots did here``."""
    lines = []
    phs = list(gm.graph.find_nodes(op="placeholder"))
    lines.append(f"def {name}(")
    for p in phs:
        note = p.meta.get(SLOT_META)
        lines.append(f"    {p.name}: {_annotation(p)}," + (f"  # {note}" if isinstance(note, str) else ""))
    lines.append("):")
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            continue
        if n.op == "output":
            lines.append(f"    return {_arg(n.args[0])}")
            continue
        args = [_arg(a) for a in n.args] + [f"{k}={_arg(v)}" for k, v in n.kwargs.items()]
        ann = _annotation(n)
        lhs = f"{n.name}: {ann}" if ann else n.name
        line = f"    {lhs} = {_target(n)}({', '.join(args)})"
        note = n.meta.get(SLOT_META)
        if isinstance(note, str):
            line += f"  # {note}"
        lines.append(line)
    return "\n".join(lines)


def format_plan(saved: SavedSet, plan: ArenaPlan) -> str:
    """The plan as a table, then its totals. Members of one group share its storage and offset."""
    header = ("tensor", "shape", "stride", "bytes", "group", "offset", "write")
    rows = []
    for p in plan.placements:
        g = saved.groups[p.group]
        for m in g.members:
            t = saved.tensor(m)
            where = "-" if not (p.write.owns_bytes or p.write is Write.OFFLOAD) else str(
                p.member_offset(t))
            if p.write is Write.OFFLOAD:
                where = "host " + where
            write = p.write.value
            if p.write is Write.COPY:
                write += (" (copy)" if m in p.copies
                          else f" (alias of {p.copies[0]})" if len(p.copies) == 1 else " (alias)")
            rows.append((m, shape_str(t.dtype, t.shape), str(list(t.stride)), str(t.nbytes),
                         f"g{p.group}", where, write))
    lines = _table(header, rows)
    lines.append("")
    lines += _group_lines(saved, plan)
    lines.append(f"arena bytes per slot: {plan.capacity}"
                 + (f" (at most {plan.capacity_bound})"
                    if plan.capacity_bound is not None and not plan.capacity.is_Integer else ""))
    lines.append(f"saved bytes in slot: {plan.slot_bytes}, copy-free: {plan.copy_free_bytes}")
    lines.append(f"bytes copied per forward: {plan.copied_bytes}"
                 + (f" (and {plan.staged_bytes} of inputs staged into the slot before each "
                    f"replay)" if plan.staging else ""))
    if plan.host_capacity != 0:
        lines.append(f"host arena bytes per slot: {plan.host_capacity}, "
                     f"bytes offloaded per forward: {plan.offloaded_bytes}")
    return "\n".join(lines)


def _group_lines(saved: SavedSet, plan: ArenaPlan) -> list[str]:
    """Each group's write and why; for a copied one, what would make it copy-free."""
    lines = ["groups:"]
    for p in plan.placements:
        lines.append(f"  g{p.group}: {p.write.value:<9} offset {p.offset}, {p.nbytes} bytes"
                     f"  ({p.reason})")
        if p.write is Write.COPY and p.remedy:
            lines.append(f"      copy-free would take: {p.remedy}")
    if saved.passthrough:
        lines.append("passed to backward untouched: " + ", ".join(
            f"{name} ({what})" for name, what in saved.passthrough))
    return lines


def format_arena_grads(deliver: Any, layout: Any, capacity: int, alignment: int) -> str:
    """Where a delivering backward writes each gradient at one layout (``fxslots.overlay``):
    the arena bytes it takes and the groups whose bytes those were (with the node that read
    them last), or the output buffer; then where it computes the temporaries that borrow
    arena bytes (``passes/borrow.py``), if any. Positions are nodes of the delivering
    backward."""
    from .overlay import END

    ov = deliver.overlay.at(layout.values)
    names = [n.name for n in deliver.graph.graph.nodes]
    spans, offsets, temp_offsets = ov.place_at(layout.groups, capacity, alignment)

    def over(off: int, n: int) -> str:
        return ", ".join(
            f"{'staged inputs' if s.group < 0 else f'g{s.group}'} (read last by "
            f"{'the output' if s.last_read == END else names[s.last_read]})"
            for s in spans if s.start < off + n and off < s.end) or "bytes no group holds"

    rows = [(f"output {out}", str(n), names[at], "output buffer", "-") if off is None else
            (f"output {out}", str(n), names[at], f"arena [{off}, {off + n})", over(off, n))
            for out, n, at, off in zip(deliver.outputs, ov.nbytes, ov.writes, offsets,
                                       strict=True)]
    lines = _table(("gradient", "bytes", "written by", "goes to", "over"), rows)
    placed = sum(n for n, off in zip(ov.nbytes, offsets, strict=True) if off is not None)
    lines.append(f"in the arena: {placed} of {sum(ov.nbytes)} gradient bytes "
                 f"(arena {capacity} bytes)")
    if ov.graph is not None:
        lines += [""] + _borrowed_lines(ov, temp_offsets, names, over)
    return "\n".join(lines)


def _borrowed_lines(ov: Any, offsets: Any, names: list[str], over: Any) -> list[str]:
    """The temporaries' rows: pointwise results computed over the saved input they read last,
    then those computed into bytes the backward has finished reading; all only when every one
    of the latter finds some at this layout (the graph that computes them there takes a view
    for each), else all in the pool."""
    every = ov.borrows(offsets)
    args = [n.name for n in ov.graph.graph.nodes if n.op == "placeholder"]
    rows = [(names[p.write], str(p.nbytes), names[p.last_read], "its input" if every else "pool",
             f"g{p.group} ({args[p.arg]}, read last there)" if every else "-")
            for p in ov.inplace]
    rows += [(names[t.write], str(t.nbytes), names[t.last_read],
              f"arena [{off}, {off + t.nbytes})" if every else "pool",
              over(off, t.nbytes) if every else "-")
             for t, off in zip(ov.temps, offsets, strict=True)]
    lines = _table(("temporary", "bytes", "read last by", "computed in", "over"), rows)
    total = ov.temp_bytes
    lines.append(f"temporaries in the arena: {total if every else 0} of {total} bytes"
                 + ("" if every else f" ({sum(o is None for o in offsets)} find no bytes "
                                     f"at this layout: all stay in the pool)"))
    return lines


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """Left-aligned columns under a header and a rule, as every table here prints."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return ([fmt.format(*header).rstrip(), fmt.format(*("-" * w for w in widths)).rstrip()]
            + [fmt.format(*r).rstrip() for r in rows])
