"""Out-variants fxslots registers, through ``torch.library``, for ops that have none.

Each is a real kernel that writes into the memory it is given: the same kernels, in the same
order, as the op it stands for, so its results are bitwise the op's. A variant mirrors one
implementation: it is registered only while the op's source is the one it was written
against (a fingerprint of that source), so a library update that changes the op turns the
route off (the group is then copied, which is always correct) instead of computing
something else.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import sys
import textwrap
from typing import Any, Callable

import torch

_lib: torch.library.Library | None = None
_registered: dict[str, str | None] = {}  # op qualname -> its out-variant's qualname, or None


def out_variant(qualname: str) -> str | None:
    """The out-variant registered for ``qualname`` (``"transformers::grouped_mm_fallback"``),
    registering it on first use when its source matches; None when there is none."""
    if qualname not in _registered:
        known = _KNOWN.get(qualname)
        _registered[qualname] = known() if known is not None else None
    return _registered[qualname]


def _define(name: str, schema: str, kernel: Callable[..., Any]) -> str:
    global _lib
    if _lib is None:
        _lib = torch.library.Library("fxslots", "DEF")
    _lib.define(f"{name}.out{schema}")
    for key in ("CPU", "CUDA"):  # a device kernel: it writes into out= itself
        _lib.impl(f"{name}.out", kernel, key)
    return f"fxslots::{name}.out"


def _fingerprint(fn: Callable[..., Any]) -> str:
    """A hash of ``fn``'s body as Python reads it: comments, layout and the docstring do not
    count."""
    body = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0].body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    return hashlib.sha256("\n".join(ast.unparse(x) for x in body).encode()).hexdigest()[:16]


# transformers.integrations.moe._grouped_mm_fallback (transformers 5.x): zeros, then one
# torch.mm(..., out=output[start:end]) per expert with tokens.
_GROUPED_MM_FINGERPRINTS = {"2ae38c06519f164d"}


def _grouped_mm_fallback_out(input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor, *,
                             out: torch.Tensor) -> torch.Tensor:
    out.zero_()
    start = 0
    for i, end in enumerate(offs.tolist()):
        if start == end:
            continue
        torch.mm(input[start:end], weight[i], out=out[start:end])
        start = end
    return out


def _grouped_mm_fallback() -> str | None:
    moe = sys.modules.get("transformers.integrations.moe")
    fn = getattr(moe, "_grouped_mm_fallback", None)
    if fn is None or _fingerprint(fn) not in _GROUPED_MM_FINGERPRINTS:
        return None
    return _define("transformers_grouped_mm_fallback",
                   "(Tensor input, Tensor weight, Tensor offs, *, Tensor(a!) out) -> Tensor(a!)",
                   _grouped_mm_fallback_out)


_KNOWN: dict[str, Callable[[], str | None]] = {
    "transformers::grouped_mm_fallback": _grouped_mm_fallback,
}
