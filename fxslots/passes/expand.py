"""Expansions: replay an op's kernel as the short sequence of ops it is, with the last op's
out= kernel writing into the slot (``fxslots.routes.EXPANSIONS`` says which ops, and why).

Each function turns ``node`` in place and returns how many nodes it changed or added. ``outs``
maps an output index to its slot view; an output nobody saves gets scratch. Every sequence
here mirrors the PyTorch source named beside it, kernel for kernel, so results are bitwise
those of the op (the zoo tests and tests/test_routes.py check it).
"""

from __future__ import annotations

import operator
from typing import Callable

import torch
import torch.fx as fx

from .._torch import op_schema

aten = torch.ops.aten


# Node meta: the (target, args, kwargs) an expanded node had, for lowerings that want the op
# itself back (Inductor lowers ``embedding`` into the kernel that stores it, but takes no
# ``index_select.out`` into a view of its input).
EXPANDED_FROM = "fxslots_expanded_from"


def expand(graph: fx.Graph, node: fx.Node, outs: dict[int, fx.Node]) -> int:
    """Rewrite ``node`` (an op in ``EXPANSIONS``) to write its saved outputs into ``outs``."""
    node.meta[EXPANDED_FROM] = (node.target, node.args, dict(node.kwargs))
    with graph.inserting_before(node):
        return _EXPAND[node.target](graph, node, outs)


def _relu(graph, node, outs) -> int:
    # Activation.cpp: relu(self) = clamp_min(self, 0) on CPU and CUDA.
    node.target, node.args, node.kwargs = aten.clamp_min.out, (node.args[0], 0), {"out": outs[0]}
    return 1


def _scalar(out_op) -> Callable:
    def expand_scalar(graph, node, outs) -> int:
        # BinaryOps.cpp: foo.Scalar(self, other) = foo(self, wrapped_scalar_tensor(other));
        # an out= overload called with a Python number wraps it the same way.
        extra = node.args[2:]  # alpha, passed by keyword to the out= overload
        names = [a.name for a in op_schema(node.target).arguments][2:2 + len(extra)]
        kwargs = {**dict(zip(names, extra, strict=True)), **node.kwargs, "out": outs[0]}
        node.target, node.args, node.kwargs = out_op, tuple(node.args[:2]), kwargs
        return 1
    return expand_scalar


def _safe_softmax(graph, node, outs) -> int:
    # attention.cpp: softmax, then zero every row that is all -inf.
    x, dim = node.args[0], node.args[1]
    dtype = node.meta["val"].dtype
    device = node.meta["val"].device
    sm = graph.call_function(aten._softmax.default, (x, dim, False))
    neg_inf = graph.call_function(aten.scalar_tensor.default, (float("-inf"),),
                                  {"dtype": dtype, "device": device})
    rows = graph.call_function(aten.all.dim, (
        graph.call_function(aten.eq.Tensor, (x, neg_inf)), dim, True))
    zero = graph.call_function(aten.scalar_tensor.default, (0.0,),
                               {"dtype": dtype, "device": device})
    node.target, node.args, node.kwargs = aten.where.self_out, (rows, zero, sm), {"out": outs[0]}
    return 6


def _embedding(graph, node, outs) -> int:
    # Embedding.cpp: weight.index_select(0, indices.reshape(-1)).view(indices.shape + [dim]).
    weight, indices = node.args[0], node.args[1]
    dim = node.meta["val"].shape[-1]
    flat = graph.call_function(aten.view.default, (outs[0], [-1, dim]))
    node.target = aten.index_select.out
    node.args = (weight, 0, graph.call_function(aten.reshape.default, (indices, [-1])))
    node.kwargs = {"out": flat}
    node.replace_all_uses_with(outs[0], delete_user_cb=lambda user: user is not node)
    return 3


def _sort(graph, node, outs) -> int:
    # Sorting.cpp: sort(self, dim, descending) = sort(self, stable=false, dim, descending).
    args = dict(zip(("self", "dim", "descending"), node.args, strict=False))
    kwargs = {"stable": False, "dim": args.get("dim", -1),
              "descending": args.get("descending", False), **node.kwargs}
    for k, name in enumerate(("values", "indices")):
        kwargs[name] = outs[k] if k in outs else _empty_like_output(graph, node, k)
    node.target, node.args, node.kwargs = aten.sort.values_stable, (node.args[0],), kwargs
    return 1


def _index_put(graph, node, outs) -> int:
    # TensorAdvancedIndexing.cpp: index_put = self.clone().index_put_(indices, values, ...).
    copied = graph.call_function(aten.copy_.default, (outs[0], node.args[0]))
    node.target, node.args = aten.index_put_.default, (copied, *node.args[1:])
    return 2


def _masked_fill(in_place):
    def expand_masked_fill(graph, node, outs) -> int:
        # TensorAdvancedIndexing.cpp: masked_fill = self (expanded to the mask's shape)
        # .clone(contiguous), then masked_fill_(mask, value) on the clone; copy_ broadcasts.
        copied = graph.call_function(aten.copy_.default, (outs[0], node.args[0]))
        node.target, node.args = in_place, (copied, *node.args[1:])
        return 2
    return expand_masked_fill


def _constant_pad_nd(graph, node, outs) -> int:
    # PadNd.cpp, constant_pad_nd (routes send only pads >= 0 here): output.fill_(value), then
    # narrow the output by each dimension's pads (the last dimension's pair first) and
    # copy_(narrowed, input). Fill and copy are exact, so this is bitwise the op.
    x, pad = node.args[0], node.args[1]
    value = node.args[2] if len(node.args) > 2 else node.kwargs.get("value", 0)
    inner = graph.call_function(aten.fill_.Scalar, (outs[0], value))
    ndim = node.meta["val"].dim()
    for j in range(len(pad) // 2):
        left, right = pad[2 * j], pad[2 * j + 1]
        if left or right:
            inner = graph.call_function(aten.slice.Tensor,
                                        (inner, ndim - 1 - j, left, -right if right else None))
    node.target, node.args, node.kwargs = aten.copy_.default, (inner, x), {}
    node.replace_all_uses_with(outs[0], delete_user_cb=lambda user: user is not node)
    return 2 + len(pad) // 2


def _empty_like_output(graph, node, k) -> fx.Node:
    v = node.meta["val"][k]
    return graph.call_function(aten.empty.memory_format, ([0],),
                               {"dtype": v.dtype, "device": v.device})


def _native_dropout(graph, node, outs) -> int:
    # Dropout.cpp, native_dropout_cpu: a bool mask from bernoulli_(1 - p), then
    # input.mul(mask).mul_(scale). (Routes only send training-mode dropout here.)
    x, p = node.args[0], node.args[1]
    mask = outs[1] if 1 in outs else graph.call_function(aten.empty_like.default, (x,),
                                                         {"dtype": torch.bool})
    out = outs[0] if 0 in outs else graph.call_function(aten.empty_like.default, (x,))
    p1m = 1.0 - p
    drawn = graph.call_function(aten.bernoulli_.float, (mask, p1m))
    product = graph.call_function(aten.mul.out, (x, drawn), {"out": out})
    scaled = graph.call_function(aten.mul_.Scalar, (product, 0.0 if p1m == 0 else 1.0 / p1m))
    for user in list(node.users):
        if user.target is operator.getitem:
            user.args = (((scaled, drawn)[user.args[1]],), 0)
    graph.erase_node(node)
    return 5


def _convolution(graph, node, outs) -> int:
    # Convolution.cpp, _convolution with ConvBackend::Cudnn (routes._cudnn_convolves): the
    # global cuDNN flags aten.convolution reads, read now.
    x, w, bias, stride, padding, dilation, _, _, groups = node.args
    deterministic = (torch.backends.cudnn.deterministic
                     or torch.are_deterministic_algorithms_enabled())
    node.target = torch.ops.fxslots.cudnn_convolution.out
    node.args = (x, w, bias, padding, stride, dilation, groups, torch.backends.cudnn.benchmark,
                 deterministic, torch.backends.cudnn.allow_tf32)
    node.kwargs = {"out": outs[0]}
    return 1


_EXPAND: dict = {
    aten.relu.default: _relu,
    aten.mul.Scalar: _scalar(aten.mul.out),
    aten.add.Scalar: _scalar(aten.add.out),
    aten.sub.Scalar: _scalar(aten.sub.out),
    aten.div.Scalar: _scalar(aten.div.out),
    aten._safe_softmax.default: _safe_softmax,
    aten.embedding.default: _embedding,
    aten.native_dropout.default: _native_dropout,
    aten.sort.default: _sort,
    aten.index_put.default: _index_put,
    aten.masked_fill.Scalar: _masked_fill(aten.masked_fill_.Scalar),
    aten.masked_fill.Tensor: _masked_fill(aten.masked_fill_.Tensor),
    aten.convolution.default: _convolution,
    aten.constant_pad_nd.default: _constant_pad_nd,
}
