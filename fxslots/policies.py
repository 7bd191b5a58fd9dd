"""Policies: small named callables an option selects by name."""

from __future__ import annotations

from typing import Any, Callable

import torch

from . import _torch

PARTITIONERS = {
    # Saves few tensors and recomputes cheap ones (views, pointwise) in backward.
    "min_cut": _torch.min_cut_rematerialization_partition,
    # Saves every forward value the backward reads, views included, exactly as traced: what
    # eager autograd saves.
    "default": _torch.default_partition,
}
AUTO = "auto"  # the default: see resolve_partitioner


def resolve_partitioner(name: str, kernels: str, checkpointed: bool) -> str:
    """The partitioner option ``name`` names: "auto" is min-cut when Inductor compiles the
    graphs (it fuses what min-cut recomputes into the kernels around it) or when the model
    checkpoints activations (a request to trade compute for memory, which min-cut serves
    best), and default otherwise: with ATen kernels each recomputed op is a kernel of its own
    that reads and writes its whole tensor: on the H200 (run 22) min-cut put llama-large at
    1.02-1.03x eager's step time and the default partitioner at 0.98-0.99x, for 28% more saved
    bytes, eager's own (docs/design.md, "Which partitioner, and recomputing norms")."""
    if name != AUTO:
        return name
    return "min_cut" if kernels == "inductor" or checkpointed else "default"


def _is_pointwise(node) -> bool:
    tags = getattr(node.target, "tags", ())
    return torch.Tag.pointwise in tags and torch.Tag.nondeterministic_seeded not in tags


# Normalizations whose backward reads their input anyway, with the out= overload that would
# write them into the slot: PyTorch generates it from the functional op plus a copy on CPU and
# CUDA, so saving their outputs costs a copy into the slot.
_NORMS = {
    torch.ops.aten.native_layer_norm.default: "aten::native_layer_norm.out",
    torch.ops.aten.native_group_norm.default: "aten::native_group_norm.out",
}


def _is_uncopyable_norm(node) -> bool:
    out = _NORMS.get(node.target)
    val = node.meta.get("val")
    first = val[0] if isinstance(val, (tuple, list)) and val else None
    # other ops' outputs may hold None (a custom op's value (None, its updated input))
    return (out is not None and isinstance(first, torch.Tensor)
            and not _torch.has_device_kernel(out, first.device.type))


def is_host_scalar(node) -> bool:
    """A 0-d CPU tensor computed only from others (a float of the shapes, ``1 / sqrt(d)``,
    that Dynamo turned into a tensor): the backward recomputes it from the shapes for nothing,
    where saving it would put a host tensor among a GPU graph's saved tensors (which then runs
    without slots) or, on CPU, a 512-byte slot place and a copy. Every recompute policy
    includes it."""
    val = node.meta.get("val")
    if not (isinstance(val, torch.Tensor) and val.dim() == 0 and val.device.type == "cpu"):
        return False
    if torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ()):
        return False
    # An output of an op with several (nll_loss's total weight) is computed from that op's
    # inputs: recomputing it recomputes the op, which min-cut cannot (a partition error)
    return all(not isinstance(v := a.meta.get("val"), (tuple, list)) and (
        not isinstance(v, torch.Tensor) or (v.dim() == 0 and v.device.type == "cpu"))
        for a in node.all_input_nodes)


RECOMPUTE: dict[str, Callable[[Any], bool]] = {
    # Save what the partitioner chooses.
    "none": lambda node: False,
    # Recompute layer and group norms in backward when no kernel of the device writes them into
    # given memory: their backward keeps their input anyway, so the slot holds neither their
    # outputs nor a copy of them, for one norm kernel in backward (about a copy's traffic).
    "norms": _is_uncopyable_norm,
    # Also deterministic pointwise ops (gelu, tanh, mul...), recomputed from their inputs
    # instead of saving their outputs: one cheap kernel in backward for a saved tensor less.
    "pointwise": lambda node: _is_uncopyable_norm(node) or _is_pointwise(node),
}


def is_parameter_like(x: Any) -> bool:
    """A static input that is a parameter or buffer: a tensor with elements, not the token of
    an effectful op (a size-0 static input when traced, which AOTAutograd passes as None)."""
    return (isinstance(x, torch.Tensor) and all(isinstance(n, int) for n in x.shape)
            and x.numel() > 0)


def anchors_of(args: Any, candidates: Any) -> tuple[int, ...]:
    """The first and last of the static inputs ``candidates`` that are ``nn.Parameter``s
    (buffers where none is), which name a module: its parameter set. Read from the first call's
    arguments (tracing sees fake tensors, not Parameters). Not a buffer where a parameter
    exists: a forward may rebind one every step (``self.steps = self.steps + 1``), and each
    new tensor would name a new module."""
    params = [i for i in candidates if isinstance(args[i], torch.nn.Parameter)] or list(candidates)
    return (params[0], params[-1]) if params else ()
