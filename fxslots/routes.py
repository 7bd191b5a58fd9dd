"""Routes: how an op can write its result into memory fxslots hands it. Op knowledge only (the
schemas and the dispatcher's kernel table); no graph, no plan.

A route is honest when the kernel that computes the value writes it into the given memory:

- the op's out= overload, when the device has a kernel of its own for it. PyTorch generates
  the out= overloads of many ops (``native_layer_norm.out``, ``convolution.out``,
  ``native_dropout.out``, ``embedding.out``...) as CompositeExplicitAutograd kernels that run
  the functional op and then copy into ``out``: a copy hidden in a kernel, no cheaper than
  fxslots' own ``copy_`` and, for an op with several outputs, dearer (it copies all of them);
- the out= overload of a factory that PyTorch writes by hand as a fill of ``out`` (``zeros``,
  ``ones``, ``full``: ``FILLS``), though it is registered as a composite;
- ``copy_`` into the slot, for an op that is itself a copy (``clone``, ``_to_copy``): the one
  copy the graph already made now lands in the slot;
- for the ``*_functional`` form of an op that updates buffers in place
  (``_native_batch_norm_legit_functional``), the in-place op's out= overload on clones of the
  buffers, which is what the functional form runs;
- for an op whose kernel is a short sequence of other ops (``relu`` is ``clamp_min(x, 0)``),
  that sequence with its last op's out= kernel writing into the slot (``EXPANSIONS``; the
  rewrite lives in ``passes/expand.py``). Each mirrors the PyTorch source it names;
  tests/test_routes.py and the zoo tests pin it bitwise;
- for a custom op without an out= form, an out-variant fxslots registers through
  ``torch.library`` (``fxslots/out_variants.py``);
- for SDPA's efficient and cuDNN attention on CUDA, up to a size, fxslots' own attention
  forward (``fxslots/attention.py``), which writes output and logsumexp where PyTorch's
  backward reads them: the one route whose kernel is not the op's own.

Anything else is copied once, and the plan says why and what would make it copy-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from . import _torch
from .out_variants import VIA, cudnn_convolution, out_variant, refusal
from .sizes import format_dense

aten = torch.ops.aten

COPY = "aten::copy_"
TENSOR_OPTIONS = frozenset({"dtype", "layout", "device", "pin_memory"})
# Ops whose value is a copy of one input (at this argument position): writing them into the
# slot is a copy_ of that input.
_COPY_OPS = {aten.clone.default: 0, aten._to_copy.default: 0, aten.copy.default: 1,
             aten.lift_fresh_copy.default: 0}


def copy_source(target: Any) -> int | None:
    """Position of the argument a copy op copies; None for other ops."""
    return _COPY_OPS.get(target)


# Out= overloads registered only as composites that nonetheless write ``out`` themselves:
# TensorFactories.cpp's zeros_out, ones_out and full_out are ``out.resize_(size)`` (a no-op on
# a slot view of that size), then ``zero_()`` / ``fill_(value)``: the kernel the functional
# op runs on the memory it allocates (``at::empty(size).zero_()`` / ``.fill_(value)``).
FILLS = frozenset({"aten::zeros.out", "aten::ones.out", "aten::full.out"})

# op -> (the out= overload that writes its result, the device whose kernel the sequence
# mirrors or None for every device, what the sequence is).
EXPANSIONS: dict[Any, tuple[str, str | None, str]] = {
    aten.relu.default: ("aten::clamp_min.out", None, "relu is clamp_min(x, 0)"),
    aten.mul.Scalar: ("aten::mul.out", None, "mul.Scalar is mul with a wrapped scalar"),
    aten.add.Scalar: ("aten::add.out", None, "add.Scalar is add with a wrapped scalar"),
    aten.sub.Scalar: ("aten::sub.out", None, "sub.Scalar is sub with a wrapped scalar"),
    aten.div.Scalar: ("aten::div.out", None, "div.Scalar is div with a wrapped scalar"),
    aten._safe_softmax.default: ("aten::where.self_out", None,
                                 "_safe_softmax is _softmax, then where over all -inf rows"),
    aten.embedding.default: ("aten::index_select.out", None,
                             "embedding is index_select of the flattened indices"),
    aten.sort.default: ("aten::sort.values_stable", None, "sort is sort.stable(stable=False)"),
    aten.index_put.default: ("aten::_index_put_impl_", None,
                             "index_put is a clone, then index_put_ on it"),
    # TensorAdvancedIndexing.cpp, masked_fill: the input (broadcast to the mask) cloned
    # contiguous, then masked_fill_ of the clone.
    aten.masked_fill.Scalar: ("aten::masked_fill_.Scalar", None,
                              "masked_fill is a clone, then masked_fill_ on it"),
    aten.masked_fill.Tensor: ("aten::masked_fill_.Tensor", None,
                              "masked_fill is a clone, then masked_fill_ on it"),
    # native_dropout_cpu: bernoulli_ into a bool mask, then input * mask * scale; CUDA runs a
    # fused kernel with no out= form.
    aten.native_dropout.default: ("aten::mul.out", "cpu", "native_dropout on cpu is "
                                  "bernoulli_ into the mask, then mul and mul_"),
    # PadNd.cpp, constant_pad_nd with no negative pad: empty output, fill_(value), then copy_ of
    # the input into the output narrowed by the pads (the op's own copy, now into the slot).
    aten.constant_pad_nd.default: ("aten::fill_.Scalar", None, "constant_pad_nd is fill_ of "
                                   "the padded output, then copy_ of the input into its "
                                   "interior"),
    # _convolution on CUDA picks cuDNN for a 2-d, single-group, non-transposed convolution of a
    # contiguous float input (ConvBackend::Cudnn); no CPU kernel writes a convolution into out=.
    aten.convolution.default: ("fxslots::cudnn_convolution.out", "cuda",
                               "a 2-d convolution on cuda is cudnn_convolution, then add_ of "
                               "the bias"),
}


def _expands(target: Any, args: tuple, kwargs: dict) -> bool:
    """Whether the expansion covers these arguments: dropout in training mode, a softmax
    without a dtype change."""
    if target is aten.native_dropout.default:
        return (args[2] if len(args) > 2 else kwargs.get("train")) is not False
    if target is aten._safe_softmax.default:
        return (args[2] if len(args) > 2 else kwargs.get("dtype")) is None
    if target is aten.convolution.default:
        return _cudnn_convolves(args)
    if target is aten.constant_pad_nd.default:  # a negative pad narrows the input instead
        return len(args) > 1 and all(type(p) is int and p >= 0 for p in args[1])
    return True


def _cudnn_convolves(args: tuple) -> bool:
    """Whether ``aten.convolution`` runs cuDNN's kernel on these arguments (static shapes, no
    64-bit indexing), as ``fxslots::cudnn_convolution.out`` does; registers that op."""
    # is_available: a CUDA build without cuDNN would fail at run time, not copy.
    if len(args) != 9 or not (torch.backends.cudnn.enabled and torch.backends.cudnn.is_available()):
        return False
    x, w = (getattr(a, "meta", {}).get("val") for a in args[:2])
    stride, padding, dilation, transposed, _, groups = args[3:]
    if not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in (x, w)):
        return False
    sizes = (*x.shape, *w.shape, *stride, *padding, *dilation)
    if transposed or groups != 1 or not all(type(n) is int for n in sizes):
        return False
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16) or x.dtype != w.dtype:
        return False
    out = [(x.shape[2 + i] + 2 * padding[i] - dilation[i] * (w.shape[2 + i] - 1) - 1)
           // stride[i] + 1 for i in range(2)]
    numel = max(x.numel(), x.shape[0] * w.shape[0] * out[0] * out[1])
    cudnn_convolution()
    return x.is_contiguous() and w.is_contiguous() and 0 < numel < 2**31


@dataclass(frozen=True)
class Route:
    """How a value reaches given memory: ``op`` (a qualified overload name, or ``COPY``), or
    why it cannot (``why``) and what would make it possible (``remedy``)."""

    op: str | None
    why: str | None = None
    remedy: str | None = None
    via: str | None = None  # the sequence an expansion replays, when the route is one


# Ops whose out= kernels on a device compute wrong values, with no error, for an input
# (argument 0) that is not dense in a memory format, where the functional kernel is right: CPU
# batch norm in training (a transposed (B, T, C) -> (B, C, T) input gave garbage statistics and
# outputs; found by a review, session 48). CUDA's kernel is right there (H100, run 68e).
DENSE_INPUT = {"cpu": frozenset({"aten._native_batch_norm_legit_functional",
                                 "aten._native_batch_norm_legit", "aten.native_batch_norm"})}


def _sparse_input(target: Any, device_type: str, args: tuple) -> Route | None:
    """No route where ``target``'s out= kernel would write these arguments' result wrong
    (``DENSE_INPUT``)."""
    v = getattr(args[0], "meta", {}).get("val") if args else None
    if (str(target.overloadpacket) not in DENSE_INPUT.get(device_type, ())
            or not isinstance(v, torch.Tensor) or format_dense(v)):
        return None
    return Route(None, f"{target.overloadpacket}'s out= kernel computes wrong values for an "
                       f"input that is not dense in a memory format (strides {tuple(v.stride())})",
                 "an input dense in a memory format (.contiguous() first)")


def find_route(target: Any, device_type: str, source_device: str | None = None,
               args: tuple = (), kwargs: dict | None = None) -> Route:
    """The cheapest honest route for the values ``target(*args, **kwargs)`` returns on
    ``device_type``.

    ``source_device`` is the device type of a copy op's input (``copy_`` into the slot is
    its route when that is ``device_type`` too)."""
    name = getattr(target, "__name__", str(target))
    if not isinstance(target, _torch.OpOverload):
        return Route(None, f"{name} is not an ATen operator",
                     f"an out= form for {name} (a custom op can register one)")
    qualname = _torch.op_qualname(target)
    if (sparse := _sparse_input(target, device_type, args)) is not None:
        return sparse
    refused = refusal(qualname, args, kwargs)
    variant = None if refused else out_variant(qualname)
    if variant is not None and _torch.has_device_kernel(variant, device_type):
        return Route(variant, via=VIA.get(qualname, f"fxslots' out-variant of {target}: the "
                                                    f"same kernels, writing into out="))
    if target in _COPY_OPS and source_device == device_type:
        return Route(COPY)
    expansion = EXPANSIONS.get(target)
    if expansion is not None and expansion[1] in (None, device_type) and _expands(
            target, args, kwargs or {}) and _torch.has_device_kernel(expansion[0], device_type):
        return Route(expansion[0], via=expansion[2])
    overload, why = find_out_overload(target)
    if overload is None and str(target.overloadpacket).endswith("_functional"):
        overload = _functional_out(target)
    if overload is None:
        why = why if refused is None else f"{why}, and fxslots' own kernel is not used: {refused}"
        return Route(None, why, f"a kernel for {target.overloadpacket} that writes into given "
                                f"memory (an out= form; PyTorch has none, so one copy_ is the "
                                f"cheapest honest route)")
    qualname = _torch.op_qualname(overload)
    if not _torch.has_device_kernel(qualname, device_type) and qualname not in FILLS:
        return Route(None, f"{qualname} is composite on {device_type} (it runs {target}, then "
                           f"copies into out=): a copy_ moves the same bytes",
                     f"a {device_type} kernel for {qualname} that writes into out=")
    return Route(qualname)


def find_out_overload(target: Any) -> tuple[Any, str | None]:
    """The out= overload that computes what ``target`` computes, or (None, why not)."""
    if not isinstance(target, _torch.OpOverload):
        return None, f"{getattr(target, '__name__', target)} is not an ATen operator"
    schema = _torch.op_schema(target)
    if not any(a.is_out for c in _overloads(target) for a in _torch.op_schema(c).arguments):
        return None, f"{target.overloadpacket} has no out= form"
    if schema.is_mutable:
        return None, f"{target} mutates an argument"
    if not schema.returns or any(str(r.type) != "Tensor" for r in schema.returns):
        return None, f"{target} returns {len(schema.returns)} values, not all tensors"
    if any(r.alias_info is not None for r in schema.returns):
        return None, f"{target} returns a view"
    want = [(a.name, str(a.type)) for a in schema.arguments]
    # A factory's out= form takes no dtype, layout, device or pin_memory: out= carries them.
    factory = [x for x in want if x[0] not in TENSOR_OPTIONS]
    for cand in _overloads(target):
        args = _torch.op_schema(cand).arguments
        outs = [a for a in args if a.is_out]
        ins = [(a.name, str(a.type)) for a in args if not a.is_out]
        if len(outs) == len(schema.returns) and ins in (want, factory):
            return cand, None
    return None, f"{target.overloadpacket} has no out= form with the arguments of {target}"


def _overloads(target: Any) -> list[Any]:
    packet = target.overloadpacket
    return [getattr(packet, name) for name in packet.overloads()]


def _functional_out(target: Any) -> Any:
    """For ``foo_functional`` (what functionalization makes of an op updating buffers in
    place): ``foo.out``, when ``foo_functional`` returns ``foo``'s outputs followed by the
    buffers it updates (see ``updated_arguments``)."""
    schema = _torch.op_schema(target)
    base = getattr(aten, str(target.overloadpacket)[: -len("_functional")].split(".")[-1], None)
    if base is None:
        return None
    want = [(a.name, str(a.type)) for a in schema.arguments]
    for name in base.overloads():
        cand = getattr(base, name)
        args = _torch.op_schema(cand).arguments
        ins = [a for a in args if not a.is_out]
        outs = [a for a in args if a.is_out]
        mutated = tuple(i for i, a in enumerate(ins)
                        if a.alias_info is not None and a.alias_info.is_write)
        if (outs and [(a.name, str(a.type)) for a in ins] == want
                and len(outs) + len(mutated) == len(schema.returns)):
            return cand
    return None


def updated_arguments(out_op: Any) -> list[int]:
    """Positions of the non-out arguments an out= overload updates in place (the running
    statistics of ``_native_batch_norm_legit.out``); none for most ops."""
    ins = [a for a in _torch.op_schema(out_op).arguments if not a.is_out]
    return [i for i, a in enumerate(ins) if a.alias_info is not None and a.alias_info.is_write]


def out_arguments(out_op: Any) -> list[str]:
    """The out= argument names of an out overload, in the order of its returns."""
    return [a.name for a in _torch.op_schema(out_op).arguments if a.is_out]


def out_kwargs(out_op: Any, kwargs: dict) -> dict:
    """``kwargs`` less what ``out_op`` does not take (a factory's dtype and device: its out=
    tensor carries them)."""
    names = {a.name for a in _torch.op_schema(out_op).arguments}
    return {k: v for k, v in kwargs.items() if k in names or k not in TENSOR_OPTIONS}


def out_returns(out_op: Any) -> list[int]:
    """For each out= argument, the position of the return that is it: the same as the
    argument's for most ops; past values that are not outputs (cuDNN attention's sequence
    lengths) for an out-variant that returns its op's values in its op's order."""
    schema = _torch.op_schema(out_op)
    sets = [r.alias_info.before_set if r.alias_info is not None else None
            for r in schema.returns]
    outs = [a.alias_info.before_set for a in schema.arguments if a.is_out]
    return [sets.index(a) if a in sets else i for i, a in enumerate(outs)]


def resolve(qualname: str) -> Any:
    """``"aten::mm.out"`` -> ``torch.ops.aten.mm.out``."""
    ns, rest = qualname.split("::")
    packet, _, overload = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, ns), packet), overload or "default")
