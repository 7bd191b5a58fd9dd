"""Out-variants fxslots registers, through ``torch.library``, for ops that have none.

Each is a real kernel that writes into the memory it is given. Most are the same kernels, in
the same order, as the op they stand for, so their results are bitwise the op's. Such a
variant mirrors one implementation: it is registered only while the op's source is the one it
was written against (a fingerprint of that source), so a library update that changes the op
turns the route off (the group is then copied, which is always correct) instead of computing
something else. The exceptions are SDPA's efficient and cuDNN attention, whose forward fxslots
brings (``fxslots/attention.py``: same layout, same backward, not the same bits).
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import sys
import textwrap
from typing import Any, Callable

import torch

from . import attention

_lib: torch.library.Library | None = None
_registered: dict[str, str | None] = {}  # op qualname -> its out-variant's qualname, or None


def refusal(qualname: str, args: tuple = (), kwargs: dict | None = None) -> str | None:
    """Why ``qualname``'s out-variant does not take these arguments (FX nodes or values), for a
    variant that takes only some calls of its op; None when it takes them, or has no say."""
    fits = _FITS.get(qualname)
    return None if fits is None else fits(args, kwargs or {})


def out_variant(qualname: str) -> str | None:
    """The out-variant registered for ``qualname`` (``"transformers::grouped_mm_fallback"``),
    registering it on first use when its source matches; None when there is none."""
    if qualname not in _registered:
        known = _KNOWN.get(qualname)
        _registered[qualname] = known() if known is not None else None
    return _registered[qualname]


def _define(name: str, schema: str, kernel: Callable[..., Any],
            keys: tuple[str, ...] = ("CPU", "CUDA"), fake: Callable[..., Any] | None = None) -> str:
    global _lib
    if _lib is None:
        _lib = torch.library.Library("fxslots", "DEF")
    _lib.define(f"{name}.out{schema}")
    for key in keys:  # a device kernel: it writes into out= itself
        _lib.impl(f"{name}.out", kernel, key)
    torch.library.register_fake(f"fxslots::{name}.out", fake or _returns_out, lib=_lib)
    return f"fxslots::{name}.out"


def _returns_out(*args: Any, out: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    return out


def _cudnn_convolution_out(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                           padding: list[int], stride: list[int], dilation: list[int],
                           groups: int, benchmark: bool, deterministic: bool, allow_tf32: bool,
                           *, out: torch.Tensor) -> torch.Tensor:
    # Convolution.cpp, at::_convolution, ConvBackend::Cudnn: cudnn_convolution of the input
    # (contiguous in the memory format cuDNN is given), then add_ of the bias as (1, C, 1, 1).
    torch.ops.aten.cudnn_convolution.out(input.contiguous(), weight, padding, stride, dilation,
                                         groups, benchmark, deterministic, allow_tf32, out=out)
    if bias is not None:
        out.add_(bias.reshape(1, -1, 1, 1))
    return out


def cudnn_convolution() -> str:
    """``fxslots::cudnn_convolution.out``: a CUDA 2-d convolution with its bias, written into
    out= by the kernels ``aten.convolution`` runs there (``routes.EXPANSIONS`` says when)."""
    if "cudnn_convolution" not in _registered:
        _registered["cudnn_convolution"] = _define(
            "cudnn_convolution",
            "(Tensor input, Tensor weight, Tensor? bias, SymInt[] padding, SymInt[] stride, "
            "SymInt[] dilation, SymInt groups, bool benchmark, bool deterministic, "
            "bool allow_tf32, *, Tensor(a!) out) -> Tensor(a!)",
            _cudnn_convolution_out, keys=("CUDA",))
    return _registered["cudnn_convolution"]


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


_SDPA_ARGS = ("(Tensor query, Tensor key, Tensor value, Tensor? attn_bias, "
              "bool compute_log_sumexp, float dropout_p=0., bool is_causal=False")


def _efficient_attention() -> str:
    """``fxslots::efficient_attention.out``: fxslots' attention forward, on CUDA."""
    return _define("efficient_attention", f"{_SDPA_ARGS}, *, float? scale=None, Tensor(a!) out0, "
                   "Tensor(b!) out1, Tensor(c!) out2, Tensor(d!) out3) -> (Tensor(a!), "
                   "Tensor(b!), Tensor(c!), Tensor(d!))", attention.efficient_attention_out,
                   ("CUDA",), _returns_outs)


def _returns_outs(*args: Any, out0: torch.Tensor, out1: torch.Tensor, out2: torch.Tensor,
                  out3: torch.Tensor, **kwargs: Any) -> tuple[torch.Tensor, ...]:
    return out0, out1, out2, out3


def _cudnn_attention() -> str:
    """``fxslots::cudnn_attention.out``: fxslots' attention forward standing for cuDNN's, on
    CUDA. It returns the op's nine values in the op's order (sequence lengths included), so
    the graph's indices into them hold; four of them are written into out=."""
    return _define("cudnn_attention", f"{_SDPA_ARGS}, bool return_debug_mask=False, *, "
                   "float? scale=None, Tensor(a!) out0, Tensor(b!) out1, Tensor(c!) out6, "
                   "Tensor(d!) out7) -> (Tensor(a!), Tensor(b!), Tensor?, Tensor?, SymInt, "
                   "SymInt, Tensor(c!), Tensor(d!), Tensor?)", attention.cudnn_attention_out,
                   ("CUDA",), _cudnn_fake)


def _cudnn_fake(query: torch.Tensor, key: torch.Tensor, *args: Any, out0: torch.Tensor,
                out1: torch.Tensor, out6: torch.Tensor, out7: torch.Tensor,
                **kwargs: Any) -> tuple[Any, ...]:
    return out0, out1, None, None, query.shape[2], key.shape[2], out6, out7, None


_KNOWN: dict[str, Callable[[], str | None]] = {
    "transformers::grouped_mm_fallback": _grouped_mm_fallback,
    "aten::_scaled_dot_product_efficient_attention": _efficient_attention,
    "aten::_scaled_dot_product_cudnn_attention": _cudnn_attention,
}
# Variants that take only some calls of their op: why not these arguments (None: they do).
_FITS: dict[str, Callable[[tuple, dict], str | None]] = {
    "aten::_scaled_dot_product_efficient_attention": attention.fits_efficient,
    "aten::_scaled_dot_product_cudnn_attention": attention.fits_cudnn,
}
OWN_KERNELS = frozenset({"fxslots::efficient_attention.out", "fxslots::cudnn_attention.out"})
_OWN_KERNEL = ("fxslots' attention forward (Triton, FlashAttention-2) writes output and "
               "logsumexp in the layout of {}'s kernel; PyTorch's backward reads them (not "
               "bitwise the op's forward: copy_free=False keeps it)")
VIA = {"aten::_scaled_dot_product_efficient_attention": _OWN_KERNEL.format("the efficient"),
       "aten::_scaled_dot_product_cudnn_attention": _OWN_KERNEL.format("cuDNN")}
