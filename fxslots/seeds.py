"""SDPA's dropout seeds in the slot.

SDPA's ops return the dropout seed and offset their backward reads, and the backward reads them
only with dropout. PyTorch's efficient kernel hands them out on the host, outside a capture,
while its fake tensors say the query's device (H200 run 38b): a kernel Inductor generates to
copy one reads host memory as device memory, and cannot launch (38a). So without dropout their
slots are zeroed (``passes/rewrite.py``), and with it, under Inductor, ATen's ``copy_`` moves them
(``ops.copy_into``, ``passes/lower.py``).
"""

from __future__ import annotations

from typing import Any

from . import _torch

# Per op: the outputs that hold seed and offset, and the position of its dropout_p argument.
_SEEDS = {"aten::_scaled_dot_product_efficient_attention": ((2, 3), 5),
          "aten::_scaled_dot_product_cudnn_attention": ((6, 7), 5),
          "aten::_scaled_dot_product_flash_attention": ((6, 7), 3)}


def unread_seed(op: Any, index: int, args: tuple, kwargs: dict) -> bool:
    """Whether output ``index`` of ``op(*args, **kwargs)`` is a dropout seed or offset of an
    SDPA call without dropout: its slot is zeroed instead of copied into."""
    seeds, at = _SEEDS.get(_name(op), ((), 0))
    dropout = args[at] if len(args) > at else kwargs.get("dropout_p", 0.0)
    return index in seeds and isinstance(dropout, (int, float)) and dropout == 0


def is_seed(op: Any, index: int) -> bool:
    """Whether output ``index`` of ``op`` is an SDPA dropout seed or offset, which PyTorch's
    efficient kernel hands out on the host outside a capture (with or without dropout)."""
    return index in _SEEDS.get(_name(op), ((), 0))[0]


def _name(op: Any) -> str:
    return op.name() if isinstance(op, _torch.OpOverload) else ""
