"""Audit: read Inductor's generated code and say, per storage group, who wrote its slot bytes.

The copy-free figure must not be assumed from the graph handed to Inductor: a ``copy_`` into a
slot is free only when Inductor stores the value from the kernel that computes it. So each slot
view the forward writes is looked up in the wrapper code (which kernel or call gets it as an
output) and in that kernel's source (what it stores there). A write is *in place* when it is
an ``fxslots::*_into`` call, or a kernel storing a value it computed (a layout change, such as
the model's own ``clone`` of a transpose, counts as computing). It is a *copy* when the stored
value is a load of another of Inductor's buffers (or another slot) at the same index, i.e. bytes
moved unchanged (a separate copy kernel, or a copy fused into a neighbour); when the same value
is also stored into a buffer of Inductor's own; or when no write is found at all. Reads C++
(CPU) and Triton (GPU) kernels.
"""

from __future__ import annotations

import dataclasses
import re

import sympy

from ..schemas import ArenaPlan, Placement, Write

_KERNEL_DEF = re.compile(r"^(\w+) = async_compile\.\w+\(", re.M)
_CALL = re.compile(r"^\s*(\w+)(?:\.run)?\((.*)\)\s*$")
_ASSIGN = re.compile(r"^\s*(?:auto\s+)?(\w+)\s*=(?!=)\s*(.+?);?\s*$")
_WRAPPERS = re.compile(r"^(?:at::vec::convert<[^()]*>|static_cast<[^()]*>|c10::convert<[^()]*>)?"
                       r"\((.*)\)$", re.S)


def audit_forward(code: str, plan: ArenaPlan, inputs: list[str]) -> tuple[ArenaPlan, list[str]]:
    """``plan`` with each device group's write kind as Inductor's ``code`` made it, and one
    finding per group. ``inputs`` are the graph's placeholder names."""
    slots = {v.name for v in plan.views}
    sites = slot_writes(code, set(inputs), slots)
    placements, findings = [], []
    for p in plan.placements:
        if p.write not in (Write.OUT, Write.COPY):
            placements.append(p)
            continue
        # The views the forward writes: a copy-free group's root, or each value copied in.
        written = ([p.views[0].name] if p.write is Write.OUT else
                   [v.name for v in p.views if v.holds in p.copies])
        notes = [n for v in written for n in sites.get(v, ["no write to " + v + " found"])]
        copied = [n for n in notes if not n.startswith("in place")]
        placements.append(_as_written(p, copied[0] if copied else notes[0], not copied))
        findings.append(f"g{p.group}: {placements[-1].write.value}: {'; '.join(notes)}")
    copied_bytes = sum((p.copied_bytes for p in placements if p.write is Write.COPY),
                       sympy.Integer(0))
    return dataclasses.replace(plan, placements=tuple(placements),
                               copied_bytes=sympy.simplify(copied_bytes)), findings


def _as_written(p: Placement, note: str, in_place: bool) -> Placement:
    reason = "Inductor: " + note
    if in_place:
        return dataclasses.replace(p, write=Write.OUT, copies=(), copied_bytes=sympy.Integer(0),
                                   reason=reason)
    if p.write is Write.COPY:
        return dataclasses.replace(p, reason=reason)
    return dataclasses.replace(p, write=Write.COPY, copies=(p.views[0].holds,),
                               copied_bytes=p.nbytes, reason=reason)


def slot_writes(code: str, inputs: set[str], slots: set[str]) -> dict[str, list[str]]:
    """For each graph input the wrapper writes: one note per write ("in place: ..." or why it
    is a copy). A plain load of a graph input other than a slot is the producer's own work (a
    layout change of an input); of anything else, a copy of a value that already exists."""
    kernels = _kernel_sources(code)
    out: dict[str, list[str]] = {}
    for line in _wrapper_lines(code):
        call = _CALL.match(line)
        if call is not None and call.group(1) in kernels:
            params, body = kernels[call.group(1)]
            bound = dict(zip(params, [_base(a) for a in _args(call.group(2))]))
            for name, note in dict.fromkeys(  # a vector loop and its tail store alike
                    _kernel_writes(call.group(1), body, bound, inputs, slots)):
                out.setdefault(name, []).append(note)
        elif "torch.ops.fxslots." in line and "_into." in line:
            for a in _args(line[line.index("(") + 1:line.rindex(")")]):
                name = _base(a.split("=")[-1])
                # out=, or out0=, out1=... of an op writing several (fxslots' attention)
                if re.match(r"\s*out\d*=", a) and name in inputs:
                    op = line.strip().split("(")[0].replace("torch.ops.", "")
                    out.setdefault(name, []).append(f"in place: {op} writes it")
        elif ".copy_(" in line:
            name = _base(line.strip().split(".copy_(")[0])
            if name in inputs:
                out.setdefault(name, []).append(f"copied by the wrapper: {line.strip()}")
    return out


def _kernel_writes(kernel: str, body: str, bound: dict[str, str], inputs: set[str],
                   slots: set[str]):
    """(input written, note) for each store of ``kernel`` into a graph input."""
    defs: dict[str, str] = {}
    stores: list[tuple[str, str, str]] = []  # (pointer, index, stored expression)
    for line in body.splitlines():
        store = _store(line)
        if store is not None:
            stores.append((store[0], store[1], _resolve(store[2], defs)))
            continue
        assign = _ASSIGN.match(line)
        if assign is not None:
            defs[assign.group(1)] = assign.group(2)
    for ptr, index, value in stores:
        name = bound.get(ptr)
        if name not in inputs:
            continue
        load = _plain_load(value)
        source = bound.get(load[0]) if load is not None else None  # None: a local array
        twice = [bound[q] for q, _, v in stores if v == value and q != ptr
                 and bound.get(q) not in inputs | {None}]
        if load is not None and load[1] == index and source not in (inputs - slots) | {None}:
            yield name, f"{kernel} copies it from {source}"
        elif load is None and twice:
            yield name, f"{kernel} also stores it into {twice[0]}"
        else:
            yield name, f"in place: {kernel} computes it into the slot"


def _store(line: str) -> tuple[str, str, str] | None:
    """(pointer, index, value expression) of a store on ``line``: Triton
    ``tl.store(p + i, v, m)``, C++ ``v.store(p + i)`` or ``p[i] = v;``; else None."""
    s = line.strip()
    if s.startswith("tl.store("):
        args = _args(s[len("tl.store("):s.rindex(")")])
        return (*_address(args[0]), args[1].strip())
    if ".store(" in s:
        head, _, rest = s.partition(".store(")
        return (*_address(_args(rest[:rest.rindex(")")])[0]), head.strip())
    m = re.match(r"^(\w+)\[(.*)\]\s*=(?!=)\s*(.+?);$", s)
    return (m.group(1), _norm(m.group(2)), m.group(3)) if m is not None else None


def _address(expr: str) -> tuple[str, str]:
    """``p + i`` -> (p, normalised i)."""
    ptr, _, index = expr.strip().partition("+")
    return ptr.strip(), _norm(index)


def _norm(index: str) -> str:
    """An index expression without spaces, outer parentheses or Triton's broadcast_to."""
    i, before = re.sub(r"\s+", "", index), None
    while i != before:
        before = i
        m = re.fullmatch(r"tl\.broadcast_to\((.*),\[[^\[\]]*\]\)", i)
        i = m.group(1) if m is not None else i
        if i.startswith("(") and _close(i, 0) == len(i) - 1:
            i = i[1:-1]
    return i


def _resolve(expr: str, defs: dict[str, str]) -> str:
    """``expr`` with conversions stripped and bare variables replaced by their definitions, so
    that a stored value that is only a (converted) load reads as that load."""
    e = expr.strip()
    for _ in range(32):
        to = e.rfind(".to(")
        wrapped = _WRAPPERS.match(e) if _balanced_call(e) else None
        if to > 0 and _close(e, to + 3) == len(e) - 1:
            e = e[:to].strip()
        elif wrapped is not None:
            e = wrapped.group(1).strip()
        elif re.fullmatch(r"\w+", e) and e in defs:
            e = defs[e].strip()
        else:
            break
    return e


def _balanced_call(e: str) -> bool:
    """Whether the first '(' of ``e`` closes at its last character."""
    i = e.find("(")
    return i >= 0 and _close(e, i) == len(e) - 1


def _plain_load(e: str) -> tuple[str, str] | None:
    """(pointer, index) that ``e`` loads from, if ``e`` is nothing but one load; else None."""
    m = re.match(r"^(?:tl\.load|[\w:<>]*::loadu)\(", e)
    if m is not None and _balanced_call(e):
        return _address(_args(e[m.end():-1])[0])
    m = re.fullmatch(r"(\w+)\[([^\[\]]*)\]", e)
    return (m.group(1), _norm(m.group(2))) if m is not None else None


def _kernel_sources(code: str) -> dict[str, tuple[list[str], str]]:
    """Kernel name -> (its parameter names in order, its source)."""
    out = {}
    for m in _KERNEL_DEF.finditer(code):
        start = code.find("'''", m.end())
        end = code.find("'''", start + 3)
        src = code[start + 3:end]
        sig = re.search(r"(?:\bkernel|def \w+)\s*\(([^)]*)\)", src)
        if sig is not None:
            out[m.group(1)] = ([n for n in map(_param_name, sig.group(1).split(",")) if n], src)
    return out


def _param_name(param: str) -> str | None:
    """``in_ptr0`` of Triton's ``in_ptr0 : tl.tensor`` and of C++'s ``const at::BFloat16*
    in_ptr0`` (whose ``::`` is no annotation: bf16 kernels were once read as writing nothing)."""
    python = re.match(r"\s*(\w+)\s*:(?!:)", param)
    if python is not None:
        return python.group(1)
    words = re.findall(r"\w+", param)
    return words[-1] if words else None


def _wrapper_lines(code: str) -> list[str]:
    start = code.find("def call(")
    return code[start:].splitlines() if start >= 0 else []


def _args(text: str) -> list[str]:
    """Top-level comma-separated arguments (parentheses and brackets nest)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return out + ([cur] if cur.strip() else [])


def _base(arg: str) -> str:
    """The buffer an argument names: ``reinterpret_tensor(slot_x, ...)`` -> ``slot_x``."""
    m = re.match(r"\s*(?:reinterpret_tensor\()?\s*(\w+)", arg)
    return m.group(1) if m is not None else ""


def _close(s: str, i: int) -> int:
    depth = 0
    for j in range(i, len(s)):
        depth += {"(": 1, ")": -1}.get(s[j], 0)
        if depth == 0:
            return j
    return -1
