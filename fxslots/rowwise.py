"""Ops that are not pointwise but whose result may still take the bytes of an input it has the
geometry of, and the check that this torch's kernels allow it before a graph relies on it.

The softmaxes and their backwards read all of a row before they write any of it, and then write
each element where they read it: on CPU the row's reductions, then one pass at the same
indices; on CUDA a warp or a block a row, reduced across it before any write, each thread
writing the elements it reads. So over the last dimension of a dense tensor, written over that
input, they give the bits they give beside it. PyTorch does not promise this, and which kernel
runs depends on the row's width and the dtype (CUDA: a warp a row up to 1024, a block with the
row in shared memory where it fits, else from device memory). So each (op, dtype, width,
device) is tried once per process, on two rows of real tensors, before a graph relies on it:
``passes/borrow.py`` computes a softmax backward over the saved output it reads last (a
cross-entropy loss's, the first large temporary of a language model's backward: llama-large's
pool, H100 run 54e, 2758 -> 1758 MiB), and ``passes/share.py`` computes a saved log-softmax's
input in the slot bytes the log-softmax then writes over.
"""

from __future__ import annotations

import logging
from typing import Callable

import torch

from . import _torch
from .routes import out_arguments
from .schemas import expr
from .sizes import rows_dense

log = logging.getLogger(__name__)
aten = torch.ops.aten

# Each op, and the argument its result may go over: the backwards over their saved output, the
# forward over its input.
OVER = {aten._log_softmax_backward_data.default: 1, aten._softmax_backward_data.default: 1,
        aten._log_softmax.default: 0}
ROWWISE = tuple(op for op, k in OVER.items() if k == 1)
FORWARD = tuple(op for op, k in OVER.items() if k == 0)
_CHECKED: dict[tuple, bool] = {}
Run = Callable[[tuple, "torch.Tensor | None"], torch.Tensor]


def along_rows(op, value: torch.Tensor, dim: int) -> bool:
    """Whether ``op`` (of ``OVER``), run over ``dim`` with result ``value``, may write it over
    the input ``OVER`` names: ``dim`` is the last dimension of a dense tensor, and this torch's
    kernel gives the same bits there (``over_input``)."""
    if value.dim() == 0 or dim % value.dim() != value.dim() - 1:
        return False
    width = expr(value.shape[-1])
    return (rows_dense(value) and width.is_Integer  # a width checked once, not a symbol
            and over_input(op, value.dtype, int(width), value.device))


def over_input(op, dtype: torch.dtype, width: int, device: torch.device) -> bool:
    """Whether ``op`` (of ``OVER``) over rows ``width`` wide of ``dtype`` on ``device`` gives
    the same bits written over the input ``OVER`` names as beside it, tried once per process.
    False while a CUDA stream captures (no kernel may run outside the graph then)."""
    key = (op, dtype, width, str(device))
    if key not in _CHECKED:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return False
        try:
            with _torch.real_tensors():
                _CHECKED[key] = same_bits(_runner(op, dtype), _rows(op, dtype, width, device),
                                          OVER[op])
        except Exception as e:  # noqa: BLE001 - an unchecked kernel is not relied on
            log.info("fxslots: %s could not be checked over its input (%s)", op, e)
            _CHECKED[key] = False
        if not _CHECKED[key]:
            log.info("fxslots: %s (%s, rows of %d, %s) gives other bits over its input than "
                     "beside it: its result stays where it was", op, dtype, width, device)
    return _CHECKED[key]


def same_bits(run: Run, inputs: tuple[torch.Tensor, ...], over: int) -> bool:
    """Whether ``run(inputs, inputs[over])`` (the result written over that input) has the
    bits of ``run(inputs, None)`` (written beside it)."""
    want = run(inputs, None)
    return torch.equal(run(inputs, inputs[over]), want)


def _runner(op, dtype: torch.dtype) -> Run:
    out_op = op.overloadpacket.out
    (name,) = out_arguments(out_op)
    rest = (-1, False) if op in FORWARD else (-1, dtype)

    def run(inputs, out):
        if out is None:
            return op(*inputs, *rest)
        return out_op(*inputs, *rest, **{name: out})
    return run


def _rows(op, dtype: torch.dtype, width: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Two rows of each input: logits for a forward; for a backward, a gradient and what the
    softmax (or log-softmax) forward gave."""
    gen = torch.Generator().manual_seed(0)  # the host's, whatever the default device
    grad = torch.randn(2, width, generator=gen, device="cpu")
    if op in FORWARD:
        return (grad.to(device, dtype),)
    output = torch.randn(2, width, generator=gen, device="cpu").log_softmax(1)
    output = output if op is aten._log_softmax_backward_data.default else output.exp()
    return grad.to(device, dtype), output.to(device, dtype)
