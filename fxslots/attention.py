"""fxslots' attention forward: scaled dot-product attention written into given memory.

PyTorch's SDPA kernels allocate what they return and have no out= form, so the output and
logsumexp that their backward reads were copied into the slot (one copy per attention: 7% of
the zoo's Llama's saved bytes, 19% of its Mixtral's). This module holds a FlashAttention-2
forward in Triton that writes them where it is told, laid out exactly as
``aten._scaled_dot_product_efficient_attention`` lays them out (output in (B, M, H, K) order,
logsumexp in natural log, rows padded to 32 with +inf), so PyTorch's own backward
(``_scaled_dot_product_efficient_attention_backward``) reads them from the slot unchanged.

It is the one route that does not run the op's own kernel, so its forward is not bitwise
PyTorch's: the same sums in another order. fp32 multiplies in IEEE fp32, as the CUTLASS kernel
does (no TF32); half types round the softmax weights to the input type before ``P @ V``, as
FlashAttention and cuDNN do. ``options={"copy_free": False}`` keeps PyTorch's kernel.

It covers what a model's attention asks of that op in training: causal or full, with or
without an additive bias (the mask HuggingFace models build under ``torch.compile``, T5's
position bias), no dropout, equal head counts, head sizes up to 256, fp32/fp16/bf16 on CUDA,
and only where it is faster than PyTorch's kernel plus the copy (``MAX_FLOPS``, judged at the
size hints of symbolic shapes) (``fits_efficient``); anything else keeps the op and one copy.
Triton is imported at the first launch, never at import.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import math
from typing import Any

import torch

from . import _torch, fallback

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAX_HEAD_DIM = 256
LSE_ALIGN = 32  # the efficient kernel pads logsumexp rows to a multiple of 32 (kAlignLSE)


# Above these causal-forward FLOPs PyTorch's kernel plus one copy of output and logsumexp is
# faster than fxslots' kernel. H200, torch 2.11, benchmarks/attention.py, run 38a (fxslots'
# time over PyTorch's kernel and the copy; run 37c before int64 offsets in brackets): fp32
# 0.47x at 18 kFLOP (0.42), 0.87x at 2.1 MFLOP (0.84), 1.82x at 34 MFLOP (1.47), 3.1x at 0.8
# GFLOP (its fp32 products run on CUDA cores at a third of the CUTLASS kernel's rate; as three
# TF32 products, tf32x3, no better below 17 GFLOP); bf16 0.53x at 18 kFLOP, 0.72x at 2.1 MFLOP,
# 0.99x at 34 MFLOP, 0.95x at 0.8 GFLOP, 1.03x at 3.2 GFLOP (0.97), 1.10x at 17 GFLOP. The
# bounds are where the ratio crosses 1, interpolated in log FLOPs: below them the copy's
# launches and bytes cost more than the kernels' difference.
MAX_FLOPS = {torch.float32: 4e6, torch.float16: 2e9, torch.bfloat16: 2e9}
# cuDNN's forward (bf16 SDPA on the H200) is 3-4x faster than fxslots' from 34 MFLOP up, and
# loses to it below (0.49x at 18 kFLOP, 0.55x at 2.1 MFLOP, 1.09x at 34 MFLOP, copy included;
# 38a: 0.44x, 0.62x, 1.16x, so the crossing stays near 17 MFLOP).
MAX_FLOPS_CUDNN = {torch.float16: 16e6, torch.bfloat16: 16e6}
F32_PRECISION = "ieee"  # fp32 products as fp32, as PyTorch's kernel computes them (no TF32)
_NAMES = ("query", "key", "value", "attn_bias", "compute_log_sumexp", "dropout_p", "is_causal",
          "return_debug_mask")


def fits_efficient(args: tuple, kwargs: dict) -> str | None:
    """Why fxslots' kernel does not take ``aten._scaled_dot_product_efficient_attention(*args,
    **kwargs)`` (FX nodes or values), or None when it does: it computes the call (no
    dropout, one head count, a head size it tiles, a float type and the bias's the same, CUDA,
    Triton present) and is the cheaper route at its size (``MAX_FLOPS``)."""
    return _refusal(args, kwargs, MAX_FLOPS)


def fits_cudnn(args: tuple, kwargs: dict) -> str | None:
    """The same for ``aten._scaled_dot_product_cudnn_attention`` (half types only, no debug
    mask), against cuDNN's kernel and one copy (``MAX_FLOPS_CUDNN``)."""
    return _refusal(args, kwargs, MAX_FLOPS_CUDNN)


def _refusal(args: tuple, kwargs: dict, bounds: dict[torch.dtype, float]) -> str | None:
    given = dict(zip(_NAMES, args, strict=False)) | kwargs
    if given.get("return_debug_mask", False):
        return "it returns cuDNN's debug mask"
    q, k, v, bias = (_val(given.get(n)) for n in _NAMES[:4])
    if not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in (q, k, v)):
        return "its inputs are not 4-d tensors"
    why = _unsupported(q, k, v, bias, given)
    if why is not None:
        return why
    if q.dtype not in bounds:
        return f"fxslots' attention kernel does not stand for this op in {q.dtype}"
    flops = 4 * math.prod(_size_hint(x) for x in (*q.shape, k.shape[2]))
    flops //= 2 if given.get("is_causal", False) else 1
    if flops > bounds[q.dtype]:
        return (f"PyTorch's kernel and one copy are faster at {flops / 1e9:.3g} GFLOP than "
                f"fxslots' attention kernel (above {bounds[q.dtype] / 1e9:.3g} GFLOP in "
                f"{q.dtype})")
    if importlib.util.find_spec("triton") is None:
        return "Triton is not installed (fxslots' attention kernel is written in it)"
    return None


def _unsupported(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: Any,
                 given: dict) -> str | None:
    if bias is not None and not (isinstance(bias, torch.Tensor) and 2 <= bias.dim() <= 4
                                 and bias.dtype == q.dtype):
        return "its attention bias is not a tensor of the inputs' type"
    if given.get("dropout_p", 0.0) != 0.0:
        return "it drops out (its mask comes from PyTorch's generator, in its kernel)"
    if not isinstance(given.get("is_causal", False), bool):
        return "whether it is causal is decided at run time"
    if q.device.type != "cuda" or _capability(q.device) < (8, 0):
        return "it is not on a CUDA device of compute capability 8.0 or above"
    if torch.version.hip is not None:  # ROCm's logsumexp layout is not the one it writes
        return "it runs on ROCm, whose kernels lay out logsumexp otherwise"
    if q.dtype not in DTYPES or not q.dtype == k.dtype == v.dtype:
        return f"its inputs are {q.dtype}, {k.dtype}, {v.dtype}"
    if not (_same(q.shape[0], k.shape[0], v.shape[0]) and _same(k.shape[2], v.shape[2])
            and _same(q.shape[1], k.shape[1], v.shape[1]) and _same(q.shape[3], k.shape[3])):
        return "query, key and value differ in batch, heads, key length or head size"
    if not all(type(d) is int and 0 < d <= MAX_HEAD_DIM for d in (q.shape[3], v.shape[3])):
        return f"its head size is not at most {MAX_HEAD_DIM}"
    return None


def _same(*sizes: Any) -> bool:
    """Whether sizes are the same: equal ints, or one symbolic expression. Symbolic sizes are
    not hashed (SymInt refuses) and not compared (which would add a guard): sizes that are
    equal only at run time count as different, and the call keeps PyTorch's kernel."""
    return len({str(x) for x in sizes}) == 1


def _capability(device: torch.device) -> tuple[int, int]:
    """The device's compute capability; (0, 0) where CUDA is not there to ask (the bounds were
    measured on compute capability 9.0, and Triton's bfloat16 products need 8.0)."""
    if not torch.cuda.is_available():
        return (0, 0)
    return torch.cuda.get_device_capability(device)


def _size_hint(x: Any) -> int:
    return x if type(x) is int else _torch.size_hint(x)


def _val(x: Any) -> Any:
    return x.meta.get("val") if hasattr(x, "meta") else x


def efficient_attention_out(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attn_bias: torch.Tensor | None, compute_log_sumexp: bool,
                            dropout_p: float = 0.0, is_causal: bool = False, *,
                            scale: float | None = None, out0: torch.Tensor, out1: torch.Tensor,
                            out2: torch.Tensor, out3: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``_scaled_dot_product_efficient_attention`` into ``out0`` (output), ``out1``
    (logsumexp), ``out2`` and ``out3`` (the dropout seed and offset: zeros, which its backward
    never reads without dropout). ``attn_bias`` is (B, H, M, N), broadcast by strides."""
    b, h, m, _ = query.shape
    dv = value.shape[3]
    lm = math.ceil(m / LSE_ALIGN) * LSE_ALIGN if compute_log_sumexp else 0
    # The output in (B, M, H, K) order, whatever the query's.
    _place(dropout_p, out0, (b, h, m, dv), (m * h * dv, dv, h * dv, 1), out1, (b, h, lm),
           (out2, out3))
    _compute(torch.ops.aten._scaled_dot_product_efficient_attention.default, query, key, value,
             attn_bias, compute_log_sumexp, is_causal, scale, out0, out1, out1)
    return out0, out1, out2, out3


def cudnn_attention_out(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        attn_bias: torch.Tensor | None, compute_log_sumexp: bool,
                        dropout_p: float = 0.0, is_causal: bool = False,
                        return_debug_mask: bool = False, *, scale: float | None = None,
                        out0: torch.Tensor, out1: torch.Tensor, out6: torch.Tensor,
                        out7: torch.Tensor) -> tuple[Any, ...]:
    """``_scaled_dot_product_cudnn_attention`` into ``out0`` (output, in query's layout),
    ``out1`` (logsumexp, (B, H, M, 1)), ``out6`` and ``out7`` (seed and offset: zeros, which
    its backward never reads without dropout), returning the op's nine values."""
    if return_debug_mask:
        raise ValueError("fxslots' attention kernel returns no debug mask")
    b, h, m, _ = query.shape
    dv = value.shape[3]
    _place(dropout_p, out0, (b, h, m, dv), _strides_like(query, dv), out1, (b, h, m, 1),
           (out6, out7))
    _compute(torch.ops.aten._scaled_dot_product_cudnn_attention.default, query, key, value,
             attn_bias, compute_log_sumexp, is_causal, scale, out0, out1, out1[..., 0])
    return out0, out1, None, None, m, key.shape[2], out6, out7, None


def _place(dropout_p: float, out: torch.Tensor, shape: tuple[int, ...], strides: Any,
           lse: torch.Tensor, lse_shape: tuple[int, ...], seeds: tuple[torch.Tensor, ...]) -> None:
    """The outputs where the op's own kernel lays them out: a slot view already is; an empty
    scratch tensor (symbolic sizes) is resized into that layout, as out= kernels resize an
    empty output. The seeds are zeroed."""
    if dropout_p != 0.0:
        raise ValueError("fxslots' attention kernel takes no dropout")
    if tuple(out.shape) != shape:
        out.resize_(math.prod(shape)).as_strided_(shape, strides)
    _fit(lse, lse_shape)
    for seed in seeds:
        _fit(seed, ()).zero_()


_failed: list[str] = []  # why fxslots' kernel could not run in this process, once it could not


def _compute(op: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: Any,
             compute_lse: bool, causal: bool, scale: float | None, o: torch.Tensor,
             lse: torch.Tensor, lse_rows: torch.Tensor) -> None:
    """fxslots' kernel into ``o`` and ``lse_rows``; where it cannot run (a Triton that cannot
    build it for this device), PyTorch's ``op`` and one copy of each, from then on, with a
    warning: the graph already calls this op, and a user's training must not stop there."""
    if o.numel() == 0 and lse_rows.numel() == 0:
        return
    scale = 1.0 / math.sqrt(q.shape[3]) if scale is None else scale
    if not _failed:
        try:
            _launch(q, k, v, o, lse_rows, bias, scale, causal, q.shape[2], k.shape[2],
                    lse_rows.shape[-1])
            return
        except Exception as e:  # noqa: BLE001 (any build or launch error: the fallback is exact)
            _failed.append(f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"
                           if str(e).strip() else type(e).__name__)
            fallback.go_without(f"its attention kernel, which failed ({_failed[0]}): "
                                f"attention runs {op} and copies output and logsumexp into the "
                                f"slot from now on", strict=False)
    ours = op(q, k, v, bias, compute_lse, 0.0, causal, scale=scale)
    o.copy_(ours[0])
    lse.copy_(ours[1])


def _strides_like(query: torch.Tensor, dv: int) -> list[int]:
    """Dense strides of query's shape with head size ``dv``, dimensions in query's order."""
    shape = (*query.shape[:3], dv)
    strides, step = [0] * 4, 1
    for i in sorted(range(4), key=lambda i: (query.stride(i), -i)):
        strides[i], step = step, step * shape[i]
    return strides


def _fit(t: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """``t`` as a contiguous tensor of ``shape``: a slot view already is; an empty scratch
    tensor (symbolic sizes) is resized, as out= kernels resize an empty output."""
    if tuple(t.shape) != shape:
        t.resize_(shape)
    return t


def _launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
            lse: torch.Tensor, bias: torch.Tensor | None, scale: float, causal: bool, m: int,
            n: int, lm: int) -> None:
    b, h, _, d = q.shape
    dv = v.shape[3]
    bias = None if bias is None else bias.expand(b, h, m, n)  # a size-1 dimension: stride 0
    block_m, block_n, warps, stages = _tiles(q.dtype, max(d, dv))
    lse_strides = lse.stride() if lm else (0, 0, 0)
    grid = (b * h, math.ceil(max(m, lm) / block_m))
    # The device's own stream, where a capture records the launch (the interpreter: the host).
    with torch.cuda.device(q.device) if q.is_cuda else contextlib.nullcontext():
        _kernel()[grid](
            q, k, v, o, lse, q if bias is None else bias, scale * math.log2(math.e),
            *q.stride(), *k.stride(), *v.stride(), *o.stride(), *lse_strides,
            *((0, 0, 0, 0) if bias is None else bias.stride()),
            h, m, n, d, dv, lm,
            BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=_pow2(d), BLOCK_DV=_pow2(dv),
            HAS_BIAS=bias is not None, CAUSAL=causal,
            PRECISION=F32_PRECISION if q.dtype == torch.float32 else "tf32",
            num_warps=warps, num_stages=stages)


def _pow2(d: int) -> int:
    return max(16, 1 << (d - 1).bit_length())


def _tiles(dtype: torch.dtype, d: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, warps, stages). BLOCK_M is a multiple of 32, so the row blocks
    that cover the queries also cover logsumexp's padding."""
    if dtype == torch.float32:  # fp32 products run on CUDA cores: smaller tiles
        return (64, 32, 4, 2) if d <= 64 else (32, 32, 4, 2)
    if d <= 64:
        return 128, 64, 4, 3
    return (128, 64, 8, 3) if d <= 128 else (64, 32, 4, 2)


@functools.cache
def _kernel() -> Any:
    from . import attention_kernel  # imports Triton: at the first launch, never at import

    return attention_kernel.attention_forward
