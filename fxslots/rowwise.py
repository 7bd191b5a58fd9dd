"""Ops that are not pointwise but whose result may still take the bytes of an input it has the
geometry of, and the check that this torch's kernels allow it before a graph relies on it.

The softmax backwards read all of a row before they write any of it, and then write each
element where they read it: on CPU the row's sum, then one pass at the same indices; on CUDA a
warp or a block a row, the sum reduced across it before any write, each thread writing the
elements it reads. So over the last dimension of a dense tensor, written over their saved
output, they give the bits they give beside it. PyTorch does not promise this, and which
kernel runs depends on the row's width and the dtype (CUDA: a warp a row up to 1024, a block
with the row in shared memory where it fits, else from device memory). So each (op, dtype,
width, device) is tried once per process, on two rows of real tensors, before
``passes/borrow.py`` computes one over its input (a cross-entropy loss's softmax backward, the
first large temporary of a language model's backward: llama-large's pool, H100 run 54e,
2758 -> 1758 MiB).
"""

from __future__ import annotations

import logging
from typing import Callable

import torch

from . import _torch
from .routes import out_arguments

log = logging.getLogger(__name__)

LOG_SOFTMAX = torch.ops.aten._log_softmax_backward_data.default
ROWWISE = (LOG_SOFTMAX, torch.ops.aten._softmax_backward_data.default)
_CHECKED: dict[tuple, bool] = {}
Run = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None"], torch.Tensor]


def over_its_output(op, dtype: torch.dtype, width: int, device: torch.device) -> bool:
    """Whether ``op`` (one of ``ROWWISE``) over rows ``width`` wide of ``dtype`` on ``device``
    gives the same bits written over its saved output as beside it, tried once per process.
    False while a CUDA stream captures (no kernel may run outside the graph then)."""
    key = (op, dtype, width, str(device))
    if key not in _CHECKED:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return False
        try:
            with _torch.real_tensors():
                _CHECKED[key] = same_bits(_runner(op, dtype), *_rows(op, dtype, width, device))
        except Exception as e:  # noqa: BLE001 - an unchecked kernel is not relied on
            log.info("fxslots: %s could not be checked over its output (%s)", op, e)
            _CHECKED[key] = False
        if not _CHECKED[key]:
            log.info("fxslots: %s (%s, rows of %d, %s) gives other bits over its output than "
                     "beside it: its result stays in the pool", op, dtype, width, device)
    return _CHECKED[key]


def same_bits(run: Run, grad: torch.Tensor, output: torch.Tensor) -> bool:
    """Whether ``run(grad, output, output)`` (the result written over ``output``) has the
    bits of ``run(grad, output, None)`` (written beside it)."""
    want = run(grad, output, None)
    return torch.equal(run(grad, output, output), want)


def _runner(op, dtype: torch.dtype) -> Run:
    out_op = op.overloadpacket.out
    (name,) = out_arguments(out_op)

    def run(grad, output, out):
        if out is None:
            return op(grad, output, -1, dtype)
        return out_op(grad, output, -1, dtype, **{name: out})
    return run


def _rows(op, dtype: torch.dtype, width: int, device: torch.device
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows of a gradient and of what the softmax (or log-softmax) forward gave."""
    gen = torch.Generator().manual_seed(0)  # the host's, whatever the default device
    grad = torch.randn(2, width, generator=gen, device="cpu")
    output = torch.randn(2, width, generator=gen, device="cpu").log_softmax(1)
    output = output if op is LOG_SOFTMAX else output.exp()
    return grad.to(device, dtype), output.to(device, dtype)
