"""SDPA's dropout seeds in the slot.

SDPA's ops return the dropout seed and offset their backward reads, and the backward reads them
only with dropout. Without dropout PyTorch's efficient kernel hands them out as empty host
tensors while its fake tensors say the query's device (H200 run 38b), and a kernel Inductor
generated to copy one into the slot read host memory as device memory (38a: the launch
failed). So without dropout their slots are zeroed, not copied into (``passes/rewrite.py``).

With dropout the efficient kernel's backward reads the seed on the host outside a capture (the
warm-up, and every uncaptured run) and from device memory inside one: no slot, host or device,
serves both, so such a graph runs without slots (``passes/collect.py``). Flash's (on CUDA) and
cuDNN's seeds are device tensors either way, and are copied.
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx

from . import _torch

# Per op: the outputs that hold seed and offset, and the position of its dropout_p argument.
_SEEDS = {"aten::_scaled_dot_product_efficient_attention": ((2, 3), 5),
          "aten::_efficient_attention_forward": ((2, 3), 8),
          "aten::_scaled_dot_product_cudnn_attention": ((6, 7), 5),
          "aten::_scaled_dot_product_fused_attention_overrideable": ((6, 7), 4),
          "aten::_scaled_dot_product_flash_attention": ((6, 7), 3),
          "aten::_flash_attention_forward": ((2, 3), 7)}
_READ_ON_HOST = ("aten::_scaled_dot_product_efficient_attention",
                 "aten::_efficient_attention_forward")
# Flash keeps its RNG state on the device on CUDA; on ROCm it keeps the old host seed (torch's
# meta registration of flash, "BC breaking change to flash seed/offset").
if torch.version.hip:
    _READ_ON_HOST += ("aten::_scaled_dot_product_flash_attention", "aten::_flash_attention_forward")


def unread_seed(node: fx.Node) -> bool:
    """Whether ``node`` is a dropout seed or offset of an SDPA call without dropout: its slot
    is zeroed instead of copied into."""
    call = _call(node)
    if call is None:
        return False
    seeds, at = _SEEDS.get(call[0], ((), 0))
    args, kwargs = call[2], call[3]
    dropout = args[at] if len(args) > at else kwargs.get("dropout_p", 0.0)
    return call[1] in seeds and isinstance(dropout, (int, float)) and dropout == 0


def host_read_seed(node: fx.Node) -> str | None:
    """Why ``node`` cannot live in a slot (a seed the efficient kernel's backward reads on the
    host, with dropout), or None."""
    call = _call(node)
    if call is None or call[0] not in _READ_ON_HOST or call[1] not in _SEEDS[call[0]][0]:
        return None
    if unread_seed(node):
        return None
    return (f"{call[0]} with dropout: its backward reads the dropout seed on the host outside a "
            f"CUDA graph and from device memory inside one, so no slot can hold it; set "
            f"dropout_p to 0, or run SDPA's flash or cuDNN backend (torch.nn.attention."
            f"sdpa_kernel), to run this graph in slots")


def _call(node: fx.Node) -> tuple[str, int, tuple, dict] | None:
    """(op name, output index, args, kwargs) of the op call whose output ``node`` picks."""
    op = node.args[0] if node.target is operator.getitem else None
    if not (isinstance(op, fx.Node) and isinstance(op.target, _torch.OpOverload)):
        return None
    return op.target.name(), node.args[1], op.args, op.kwargs
