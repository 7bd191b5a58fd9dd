"""Analysis: what a tensor's metadata says about the memory a slot, or scratch, must give it.

A slot hands the graph views it makes from (dtype, offset, shape, stride) alone, and scratch
for an output nobody saves is an empty tensor the out= kernel resizes where sizes are symbolic
(``rewrite._scratch``). Whatever a tensor carries beyond that, such a view cannot reproduce:
a lazy conjugate's or negative's bit (``y.conj()`` shares ``y``'s bytes and reads them
conjugated), or a layout other than the contiguous one a resize gives (CPU batch norm writes
its channels_last input's order into a scratch resized contiguous: wrong values, no error).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from .. import _torch
from ..geometry import same_value
from ..schemas import expr

_hint = _torch.size_hint


def dense_overlapping(v: torch.Tensor) -> tuple[bool, bool]:
    """(dense, overlapping) judged on the shape hints: dense means one copy fills the span;
    overlapping means two indices reach one element through nonzero strides."""
    dims = sorted((_hint(st), _hint(s)) for s, st in zip(v.shape, v.stride(), strict=True)
                  if _hint(s) != 1)
    if any(s == 0 for _, s in dims):
        return True, False
    expanded = any(st == 0 for st, _ in dims)
    reach = 1  # one past the largest offset the dims so far reach
    overlapping = False
    dense = not expanded
    for st, s in (d for d in dims if d[0] != 0):
        if st < reach:  # sufficient for disjointness, not necessary: doubt falls back
            overlapping = True
        if st != reach:
            dense = False
        # The span, not stride x size: h[:, ::2] of a (4, 3, 8) tensor is shape (4, 2, 8),
        # strides (24, 16, 1), and its rows end at 16 + 8 = 24, where the next one starts.
        reach += st * (s - 1)
    return dense and not overlapping, overlapping


def static_layout(v: torch.Tensor) -> bool:
    """Whether ``v``'s sizes and strides are ints: scratch for it then gets its exact layout
    (``rewrite._scratch``), else an empty tensor the out= kernel resizes."""
    return all(isinstance(x, int) for x in (*v.shape, *v.stride()))


def lazy_bit(node: fx.Node, v: torch.Tensor) -> str | None:
    """Why the saved ``v`` cannot be a slot view: it reads its bytes conjugated or negated."""
    bit = "conjugate" if v.is_conj() else "negative" if v.is_neg() else None
    if bit is None:
        return None
    return (f"a lazy {bit} view is saved for backward ({bit} bit set): a slot's view of its "
            f"bytes would drop the bit and the backward would read the value un-{bit}d; "
            f"materialize it (torch.conj_physical, or .resolve_conj()/.resolve_neg()) to run "
            f"this graph in slots")


def unbuilt_scratch(op: fx.Node, saved_output: int, ranges: Any) -> str | None:
    """Why an out= call of the multi-output ``op`` could get an output nobody saves in the
    wrong layout: one of its outputs (other than ``saved_output``) has symbolic sizes and
    strides that are not the contiguous ones, which an empty scratch resized by the kernel
    would not have. Strides compare at sample sizes (``geometry.same_value``): symbolic
    contiguous strides often carry ``Max(1, s)`` terms a structural test would not see through."""
    for k, v in enumerate(op.meta.get("val") or ()):
        if k == saved_output or not isinstance(v, torch.Tensor):
            continue
        if static_layout(v):
            continue
        if not _contiguous(v, ranges):
            return (f"output {k} of {op.name} ({op.target}) has symbolic sizes and strides "
                    f"{tuple(v.stride())}, not contiguous: the out= kernel would resize its "
                    f"scratch contiguously")
    return None


def _contiguous(v: torch.Tensor, ranges: Any) -> bool:
    want = expr(1)
    for size, stride in reversed(list(zip(v.shape, v.stride(), strict=True))):
        if expr(size) != 1 and not same_value(expr(stride), want, ranges):
            return False
        want = want * expr(size)
    return True
