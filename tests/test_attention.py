"""fxslots' attention forward (fxslots/attention.py): which calls of SDPA's efficient attention
it takes, and what it writes, against a float64 softmax and, on CUDA, against PyTorch's own
kernel and backward. Without CUDA the kernel runs in Triton's interpreter where Triton is
installed (the GPU machine runs it for real)."""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from fxslots import attention
from fxslots.routes import find_route
from tests.helpers import release_before
from tests.test_routes import _Val  # an FX node as routes read it: its fake value

aten = torch.ops.aten
EFFICIENT = aten._scaled_dot_product_efficient_attention.default
CUDNN = aten._scaled_dot_product_cudnn_attention.default
FLASH = aten._scaled_dot_product_flash_attention.default


def _fake_qkv(device="cuda", dtype=torch.float32, heads=(4, 4, 4), d=8, dv=8):
    with FakeTensorMode():
        return (_Val(torch.empty(2, heads[0], 12, d, device=device, dtype=dtype)),
                _Val(torch.empty(2, heads[1], 12, d, device=device, dtype=dtype)),
                _Val(torch.empty(2, heads[2], 12, dv, device=device, dtype=dtype)))


@pytest.fixture
def triton_present(monkeypatch):
    """Routing asks only whether Triton is installed and what the device's compute capability
    is: an H200's (9.0), with Triton, so these tests run where neither is (CI's machine)."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "triton" else find_spec(name, *a))
    monkeypatch.setattr(attention, "_capability", lambda device: (9, 0))


def test_efficient_attention_routes_through_fxslots_kernel_only_where_it_computes_the_op(
        triton_present):
    qkv = _fake_qkv()
    route = find_route(EFFICIENT, "cuda", None, (*qkv, None, True, 0.0, True))
    assert route.op == "fxslots::efficient_attention.out" and "not bitwise" in route.via
    assert find_route(EFFICIENT, "cuda", None, (*qkv, None, True), {"is_causal": False}).op
    with FakeTensorMode():
        bias = _Val(torch.empty(2, 4, 12, 12, device="cuda"))
        half_bias = _Val(torch.empty(2, 4, 12, 12, device="cuda", dtype=torch.half))
    assert find_route(EFFICIENT, "cuda", None, (*qkv, bias, True, 0.0, False)).op
    with FakeTensorMode():
        other_batch = _Val(torch.empty(3, 4, 12, 8, device="cuda"))
    for args, why in (((qkv[0], other_batch, qkv[2], None, True), "differ in batch"),
                      ((*qkv, None, True, 0.0, object()), "decided at run time")):
        assert why in find_route(EFFICIENT, "cuda", None, args).why
    for args in ((*qkv, half_bias, True, 0.0, True),  # a bias of another type
                 (*qkv, None, True, 0.1, True),  # dropout: its mask comes from PyTorch's RNG
                 (*_fake_qkv(heads=(4, 2, 2)), None, True),  # grouped heads
                 (*_fake_qkv(d=512, dv=512), None, True),  # a head size it does not tile
                 (*_fake_qkv(dtype=torch.float64), None, True),
                 (*_fake_qkv(device="cpu"), None, True)):
        route = find_route(EFFICIENT, args[0].meta["val"].device.type, None, args)
        assert route.op is None and "fxslots' own kernel is not used" in route.why, args


def test_attention_on_rocm_keeps_pytorch_kernel(triton_present, monkeypatch):
    """ROCm's efficient kernel lays logsumexp out as (B, H, M), where fxslots' kernel writes
    (B, H, M rounded up to 32): resized, that view would run past its slot (a reviewer's
    reading of PyTorch's meta registration; no ROCm machine here)."""
    monkeypatch.setattr(torch.version, "hip", "6.0")
    route = find_route(EFFICIENT, "cuda", None, (*_fake_qkv(), None, True, 0.0, True))
    assert route.op is None and "ROCm" in route.why


def test_attention_with_symbolic_sizes_routes_without_hashing_or_guarding(triton_present):
    """Dynamic shapes give symbolic batch and sequence sizes, which cannot be hashed and must
    not be compared (a guard): one symbol is the same size, two symbols count as different,
    and the size is judged at its hint."""
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

    env = ShapeEnv()
    b, b2, s = (env.create_unspecified_symint_and_symbol(v, ConstantSource(n), DimDynamic.DYNAMIC)
                for n, v in (("b", 2), ("b2", 2), ("s", 12)))
    with FakeTensorMode(shape_env=env):
        qkv = [_Val(torch.empty(b, 4, s, 8, device="cuda")) for _ in range(3)]
        other = _Val(torch.empty(b2, 4, s, 8, device="cuda"))
    guards = len(env.guards)
    assert find_route(EFFICIENT, "cuda", None, (*qkv, None, True, 0.0, True)).op
    route = find_route(EFFICIENT, "cuda", None, (qkv[0], other, qkv[2], None, True, 0.0, True))
    assert route.op is None and "differ in batch" in route.why
    assert len(env.guards) == guards


def test_attention_of_symbolic_size_writes_logsumexp_by_its_own_kernel(triton_present):
    """At symbolic sizes attention's output is not contiguous ((B, S, H, D) transposed), so
    the rule for out= calls that would resize a non-contiguous scratch contiguously
    (``layouts.unbuilt_scratch``) refused logsumexp its route: a copy per attention, and
    ``test_attention_writes_its_slot_under_cuda_graphs[dynamic]`` failed on the H100 (run
    67b). fxslots' own kernel lays scratch out as the op returns it (``attention._place``):
    the rule is not its."""
    import operator

    import torch.fx as fx
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

    from fxslots.passes import collect

    env = ShapeEnv()
    b, s = (env.create_unspecified_symint_and_symbol(v, ConstantSource(n), DimDynamic.DYNAMIC)
            for n, v in (("b", 2), ("s", 48)))
    graph = fx.Graph()
    with FakeTensorMode(shape_env=env):
        qkv = [graph.placeholder(n) for n in "qkv"]
        for p in qkv:
            p.meta["val"] = torch.empty(b, s, 4, 16, device="cuda").transpose(1, 2)
        call = graph.call_function(EFFICIENT, (*qkv, None, True, 0.0, True))
        call.meta["val"] = EFFICIENT(*(p.meta["val"] for p in qkv), None, True, 0.0, True)
    lse = graph.call_function(operator.getitem, (call, 1))
    lse.meta["val"] = call.meta["val"][1]
    assert not call.meta["val"][0].is_contiguous()
    assert collect._root(lse, {}).out_overload == "fxslots::efficient_attention.out"


def test_efficient_attention_is_copied_where_pytorch_kernel_and_a_copy_are_faster(
        triton_present):
    """The route is taken by cost: a small attention (launches and copies dominate) goes
    through fxslots' kernel, a large one keeps PyTorch's kernel and its copy, and the plan
    says why."""
    with FakeTensorMode():
        small, large = ([_Val(torch.empty(2, 12, s, 64, device="cuda", dtype=torch.bfloat16))
                         for _ in range(3)] for s in (512, 2048))
    assert find_route(EFFICIENT, "cuda", None, (*small, None, True, 0.0, True)).op
    route = find_route(EFFICIENT, "cuda", None, (*large, None, True, 0.0, True))
    assert route.op is None and "faster at 12.9 GFLOP" in route.why, route.why
    assert "above 2 GFLOP" in route.why, route.why


def test_cudnn_attention_routes_through_fxslots_kernel_in_half_types_while_small(
        triton_present):
    """cuDNN's attention (bf16 SDPA on an H200) is taken by fxslots' kernel only below
    MAX_FLOPS_CUDNN, where its launch and copy cost more than the kernels' difference."""
    small = _fake_qkv(dtype=torch.bfloat16)
    route = find_route(CUDNN, "cuda", None, (*small, None, True, 0.0, True))
    assert route.op == "fxslots::cudnn_attention.out" and "cuDNN's kernel" in route.via
    with FakeTensorMode():
        large = [_Val(torch.empty(2, 8, 256, 64, device="cuda", dtype=torch.bfloat16))
                 for _ in range(3)]
    for args, why in (((*large, None, True, 0.0, True), "faster at 0.134 GFLOP"),
                      ((*small, None, True, 0.0, True, True), "debug mask"),
                      ((*_fake_qkv(), None, True, 0.0, True), "in torch.float32")):
        route = find_route(CUDNN, "cuda", None, args)
        assert route.op is None and why in route.why, route.why


def test_efficient_attention_without_triton_is_copied(triton_present, monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    route = find_route(EFFICIENT, "cuda", None, (*_fake_qkv(), None, True))
    assert route.op is None and "Triton is not installed" in route.why


@pytest.fixture
def run_kernel():
    """The device the kernel runs on: CUDA, else the host under Triton's interpreter, which
    must be on before Triton is imported (test_the_kernel_runs_in_triton_interpreter)."""
    if torch.cuda.is_available():
        return "cuda"
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs CUDA, or TRITON_INTERPRET=1 from the start")
    return "cpu"


@pytest.mark.skipif(torch.cuda.is_available() or importlib.util.find_spec("triton") is None
                    or os.environ.get("TRITON_INTERPRET") == "1",
                    reason="CUDA runs the kernel itself; the interpreter needs Triton")
def test_the_kernel_runs_in_triton_interpreter():
    """Without CUDA, the kernel's tests run in a fresh process with the interpreter on."""
    import triton

    if release_before(triton.__version__, 3, 7):
        # Triton 3.6 (torch 2.11's) interprets a loop bound passed unspecialized as a
        # one-element array it cannot make an int of; its compiler runs the kernel (run 37).
        pytest.skip(f"Triton {triton.__version__}'s interpreter cannot loop to a runtime bound")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k",
         "writes_output or scratch"], env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and " passed" in run.stdout, run.stdout[-3000:]


@pytest.mark.parametrize("b,h,m,n,d,dv,causal,bias,dtype", [
    (2, 4, 12, 12, 8, 8, True, None, torch.float32),  # the zoo's Llama: head size 8 (of 16)
    (1, 2, 70, 70, 64, 64, True, None, torch.float32),  # rows past a block, logsumexp padding
    (2, 3, 33, 50, 24, 40, False, None, torch.float32),  # more keys than queries, 2 head sizes
    (2, 4, 12, 12, 8, 8, False, "mask", torch.float32),  # a causal mask as HF builds it
    (2, 3, 33, 50, 24, 24, True, "position", torch.float32),  # T5's bias, and causal too
    (2, 4, 12, 12, 8, 8, False, "dead", torch.float32),  # a query row with every key masked
    (1, 2, 130, 130, 128, 128, True, None, torch.float16),
    (1, 2, 200, 200, 64, 64, False, None, torch.bfloat16),
])
def test_attention_forward_writes_output_and_logsumexp_as_the_efficient_kernel_lays_them_out(
        run_kernel, b, h, m, n, d, dv, causal, bias, dtype):
    if dtype == torch.bfloat16 and run_kernel == "cpu":
        pytest.skip("the interpreter computes bfloat16 through numpy, which has none")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, h, s, e, generator=g).to(run_kernel, dtype)
               for s, e in ((m, d), (n, d), (n, dv)))
    attn_bias = _bias(bias, b, h, m, n, dtype, g, run_kernel)
    with FakeTensorMode():
        want = EFFICIENT(*(torch.empty_strided(t.shape, t.stride(), dtype=dtype, device="cuda")
                           for t in (q, k, v)), None, True, 0.0, causal)
    outs = [torch.empty_strided(w.shape, w.stride(), dtype=w.dtype, device=run_kernel).fill_(
        -1 if w.dtype == torch.int64 else math.nan) for w in want]  # nothing left unwritten
    got = attention.efficient_attention_out(q, k, v, attn_bias, True, 0.0, causal, out0=outs[0],
                                            out1=outs[1], out2=outs[2], out3=outs[3])
    assert all(x is y for x, y in zip(got, outs, strict=True))
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(d)
    if attn_bias is not None:
        s = s + attn_bias.double()
    if causal:  # top-left: query i sees keys 0..i
        s = s.masked_fill(~torch.ones(m, n, dtype=torch.bool, device=run_kernel).tril(), -math.inf)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    # A row with no key: 0 (as the efficient kernel writes it), not softmax's 0/0.
    p = torch.softmax(s, -1).nan_to_num(0.0)
    torch.testing.assert_close(outs[0].double(), p @ v.double(), rtol=tol, atol=tol)
    torch.testing.assert_close(outs[1][..., :m].double(), torch.logsumexp(s, -1), rtol=1e-5,
                               atol=1e-5)
    assert torch.isinf(outs[1][..., m:]).all() and (outs[1][..., m:] > 0).all()
    assert outs[2].item() == outs[3].item() == 0 and not attention._failed  # our kernel ran


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_attention_forward_writes_output_and_logsumexp_as_cudnn_lays_them_out(run_kernel, dtype):
    """For cuDNN's op: output in the query's dimension order, logsumexp as (B, H, M, 1)
    unpadded, a (B, 1, M, N) mask broadcast over heads, the op's nine values returned."""
    if dtype == torch.bfloat16 and run_kernel == "cpu":
        pytest.skip("the interpreter computes bfloat16 through numpy, which has none")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 37, 3, 16, generator=g).to(run_kernel, dtype).transpose(1, 2)
               for _ in range(3))
    mask = _bias("mask", 2, 1, 37, 37, dtype, g, run_kernel)
    with FakeTensorMode():
        want = CUDNN(*(torch.empty_strided(t.shape, t.stride(), dtype=dtype, device="cuda")
                       for t in (q, k, v)), None, True, 0.0, False)
    outs = [torch.empty_strided(want[i].shape, want[i].stride(), dtype=want[i].dtype,
                                device=run_kernel).fill_(-1 if i > 1 else math.nan)
            for i in (0, 1, 6, 7)]
    got = attention.cudnn_attention_out(q, k, v, mask, True, 0.0, False, out0=outs[0],
                                        out1=outs[1], out6=outs[2], out7=outs[3])
    assert got[2:6] == (None, None, 37, 37) and got[8] is None and got[0] is outs[0]
    assert outs[0].stride() == q.stride() and outs[1].shape == (2, 3, 37, 1)
    s = (q.double() @ k.double().transpose(-1, -2)) / 4 + mask.double()
    torch.testing.assert_close(outs[0].double(), torch.softmax(s, -1) @ v.double(), rtol=2e-2,
                               atol=2e-2)
    torch.testing.assert_close(outs[1][..., 0].double(), torch.logsumexp(s, -1), rtol=1e-5,
                               atol=1e-5)
    assert outs[2].item() == outs[3].item() == 0


@pytest.mark.parametrize("op", ["efficient", "cudnn"])
def test_attention_forward_resizes_empty_scratch_into_the_op_layout(run_kernel, op):
    """With symbolic sizes the rewrite hands an output nobody saves an empty tensor (as out=
    kernels take one): it is resized into the layout the op's own kernel gives (efficient:
    (B, M, H, K) order; cuDNN: the query's), so the ops after it see the strides they were
    traced with."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 20, 3, 16, generator=g).to(run_kernel, torch.float16)
               .transpose(1, 2) for _ in range(3))
    fn, target = ((attention.efficient_attention_out, EFFICIENT) if op == "efficient" else
                  (attention.cudnn_attention_out, CUDNN))
    with FakeTensorMode():
        want = target(*(torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cuda")
                        for t in (q, k, v)), None, True, 0.0, True)
    outs = [torch.empty(0, dtype=d, device=run_kernel)
            for d in (torch.float16, torch.float32, torch.int64, torch.int64)]
    names = ("out0", "out1", "out2", "out3") if op == "efficient" else (
        "out0", "out1", "out6", "out7")
    fn(q, k, v, None, True, 0.0, True, **dict(zip(names, outs, strict=True)))
    assert outs[0].shape == want[0].shape and outs[0].stride() == want[0].stride()
    assert outs[1].shape == want[1].shape
    s = (q.double() @ k.double().transpose(-1, -2)) / 4
    s = s.masked_fill(~torch.ones(20, 20, dtype=torch.bool, device=run_kernel).tril(), -math.inf)
    torch.testing.assert_close(outs[0].double(), torch.softmax(s, -1) @ v.double(), rtol=2e-2,
                               atol=2e-2)


def _bias(kind, b, h, m, n, dtype, g, device):
    """None; a causal mask as SDPA hands it to the kernel (0 / -inf, one row per query,
    broadcast over heads by a zero stride); or a learned bias of its own per head."""
    if kind is None:
        return None
    if kind in ("mask", "dead"):  # dead: the first query sees no key (left padding, say)
        keep = torch.ones(m, n, dtype=torch.bool).tril()
        keep[0] = kind == "mask"
        mask = torch.zeros(m, n).masked_fill(~keep, -math.inf)
        return mask.to(device, dtype).expand(b, h, m, n)
    return torch.randn(b, h, m, n, generator=g).to(device, dtype)


def _like_the_slot(op, args, outputs):
    """Memory laid out as the slot's views are: as the op's fake (meta) values say, which is
    what the plan reads, not what the real kernel happened to return."""
    with FakeTensorMode(allow_non_fake_inputs=True):
        fake = op(*args)
    return [torch.empty_strided(fake[i].shape, fake[i].stride(), dtype=fake[i].dtype,
                                device="cuda") for i in outputs]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal,bias", [(True, None), (False, None), (False, "mask"),
                                         (True, "position")])
def test_pytorch_backward_reads_fxslots_forward_as_its_own(dtype, causal, bias):
    """PyTorch's efficient-attention backward, given fxslots' output and logsumexp, gives the
    gradients it gives from its own forward's."""
    torch.manual_seed(0)
    # 304 rows: not a multiple of a block; PyTorch's kernel wants a bias row of 16 bytes' step.
    q, k, v = (torch.randn(2, 8, 304, 64, device="cuda", dtype=dtype) for _ in range(3))
    attn_bias = _bias(bias, 2, 8, 304, 304, dtype, torch.Generator().manual_seed(1), "cuda")
    grad = torch.randn_like(q)
    theirs = EFFICIENT(q, k, v, attn_bias, True, 0.0, causal)
    ours = _like_the_slot(EFFICIENT, (q, k, v, attn_bias, True, 0.0, causal), (0, 1, 2, 3))
    attention.efficient_attention_out(q, k, v, attn_bias, True, 0.0, causal, out0=ours[0],
                                      out1=ours[1], out2=ours[2], out3=ours[3])
    assert [t.stride() for t in ours] == [t.stride() for t in theirs]
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(ours[0], theirs[0], **tol)
    torch.testing.assert_close(ours[1][..., :304], theirs[1][..., :304], rtol=1e-5, atol=1e-5)
    backward = aten._scaled_dot_product_efficient_attention_backward.default
    mask = [True, True, True, False]
    g_theirs = backward(grad, q, k, v, attn_bias, *theirs, 0.0, mask, causal)
    g_ours = backward(grad, q, k, v, attn_bias, *ours, 0.0, mask, causal)
    for a, b in zip(g_ours[:3], g_theirs[:3], strict=True):
        torch.testing.assert_close(a, b, **tol)
    assert not attention._failed  # fxslots' kernel ran, not the fallback to PyTorch's


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("causal,bias", [(True, None), (False, "mask")])
def test_cudnn_backward_reads_fxslots_forward_as_its_own(causal, bias):
    """cuDNN's attention backward, given fxslots' output and logsumexp (its softmax
    statistics), gives the gradients it gives from cuDNN's own forward's."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 8, 304, 64, device="cuda", dtype=torch.bfloat16)
               for _ in range(3))
    attn_bias = _bias(bias, 2, 1, 304, 304, torch.bfloat16, torch.Generator().manual_seed(1),
                      "cuda")
    grad = torch.randn_like(q)
    theirs = CUDNN(q, k, v, attn_bias, True, 0.0, causal)
    ours = _like_the_slot(CUDNN, (q, k, v, attn_bias, True, 0.0, causal), (0, 1, 6, 7))
    assert [t.stride() for t in ours[:2]] == [t.stride() for t in theirs[:2]]
    attention.cudnn_attention_out(q, k, v, attn_bias, True, 0.0, causal, out0=ours[0],
                                  out1=ours[1], out6=ours[2], out7=ours[3])
    tol = dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(ours[0], theirs[0], **tol)
    torch.testing.assert_close(ours[1], theirs[1], rtol=1e-3, atol=1e-3)
    backward = aten._scaled_dot_product_cudnn_attention_backward.default
    g_theirs = backward(grad, q, k, v, theirs[0], theirs[1], theirs[6], theirs[7], attn_bias,
                        None, None, 304, 304, 0.0, causal)
    g_ours = backward(grad, q, k, v, ours[0], ours[1], ours[2], ours[3], attn_bias, None, None,
                      304, 304, 0.0, causal)
    for a, b in zip(g_ours, g_theirs, strict=True):
        torch.testing.assert_close(a, b, **tol)
    assert not attention._failed


class _CausalSelfAttention(torch.nn.Module):
    """A decoder's attention block: fused QKV projection, SDPA, output projection. ``masked``:
    causal through a boolean mask, as HuggingFace models build it under torch.compile."""

    def __init__(self, hidden=64, heads=4, masked=False):
        super().__init__()
        self.qkv, self.o, self.heads = torch.nn.Linear(hidden, 3 * hidden), torch.nn.Linear(
            hidden, hidden), heads
        self.masked = masked

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).tril() if self.masked else None
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                             is_causal=not self.masked)
        return self.o(y.transpose(1, 2).reshape(b, s, h))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype,backend", [(torch.float32, "EFFICIENT_ATTENTION"),
                                           (torch.bfloat16, "EFFICIENT_ATTENTION"),
                                           (torch.bfloat16, "CUDNN_ATTENTION")])
@pytest.mark.parametrize("dynamic,masked", [(False, False), (True, False), (False, True)])
def test_attention_writes_its_slot_under_cuda_graphs(dtype, backend, dynamic, masked):
    """SDPA's efficient or cuDNN attention in a compiled model: fxslots' kernel writes output
    and logsumexp into the slot, under real CUDA graphs, two shapes with all four microbatches in
    flight twice over; every saved byte is copy-free (it was 1 - 2/7 of them with one copy
    per attention), and outputs and gradients match aot_eager's on the same device."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import fxslots
    from tests import zoo

    torch.manual_seed(0)
    model = _CausalSelfAttention(masked=masked).cuda().to(dtype)
    # Sizes under fp32's bound (attention.MAX_FLOPS): larger ones keep PyTorch's kernel and a copy.
    xs = [torch.randn(2, s, 64, device="cuda", dtype=dtype) for s in (48, 80)] * 2
    with sdpa_kernel(getattr(SDPBackend, backend)):
        ours = zoo.train(model, "fxslots", xs, dynamic=dynamic, options={"slots": 4})
        captures = fxslots.counters["captures"]
        # Under kernels="inductor" every graph compiles (run 38d: a forward Inductor refused
        # ran with ATen kernels, with only a warning to say so).
        inductor_fallbacks = fxslots.counters["inductor_fallbacks"]
        report = fxslots.explain(model, xs[0], dynamic=dynamic)
        ref = zoo.train(model, "aot_eager", xs, dynamic=dynamic)
    forward = report.graphs[0].forward_after
    op = "efficient_attention" if backend == "EFFICIENT_ATTENTION" else "cudnn_attention"
    assert ours.fallbacks == [] and captures > 0 and inductor_fallbacks == 0
    if fxslots.options.Options().kernels == "inductor" and dynamic:  # collect.py: copied
        assert f"fxslots.{op}.out" not in forward and ours.copy_free_fraction < 1.0, forward
    else:
        assert f"fxslots.{op}.out" in forward, forward
        assert ours.copy_free_fraction == 1.0 and not attention._failed
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    for what, a, b in (("output", ours.outputs, ref.outputs), ("grad", ours.grads, ref.grads)):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            torch.testing.assert_close(x, y, **tol, msg=f"{what} {i}")


def test_the_cudnn_variant_returns_its_outputs_where_the_op_returns_them():
    """fxslots::cudnn_attention.out returns cuDNN's nine values in cuDNN's order; its four
    out= arguments are returns 0, 1, 6 and 7, which the rewrite fills with slot views."""
    from fxslots.out_variants import out_variant
    from fxslots.routes import out_arguments, out_returns, resolve

    op = resolve(out_variant("aten::_scaled_dot_product_cudnn_attention"))
    assert out_arguments(op) == ["out0", "out1", "out6", "out7"]
    assert out_returns(op) == [0, 1, 6, 7]
    assert out_returns(aten.native_layer_norm.out) == [0, 1, 2]


def test_under_inductor_attention_of_symbolic_size_keeps_pytorch_kernel_and_its_copy():
    """Under Inductor fxslots' attention is one call writing where it is given; with symbolic
    sizes an output no slot holds goes into an empty tensor it resizes, which Inductor cannot
    see, so there attention keeps PyTorch's kernel and its copy, and the plan says why; at
    static sizes, and every other route, stay."""
    import dataclasses

    import sympy

    from fxslots.passes.collect import _without_own_kernel
    from fxslots.passes.plan import plan_arena
    from fxslots.schemas import SavedSet
    from tests.test_plan import group, root, tensor

    s = sympy.Symbol("s0", positive=True, integer=True)
    a, seed, b, c = (tensor(n, [4, 8], group=i) for i, n in enumerate(["a", "seed", "b", "c"]))
    own = "fxslots::efficient_attention.out"

    def output(name, shape, call, i):
        return dataclasses.replace(root(name, shape, out=own), producer=call, output=i)

    # One call's output of symbolic size and its static seed (H200 run 40a: the seed, left
    # in a slot, kept the op in the graph with the output in scratch it resizes), then
    # another route and another call of static size.
    groups = [group(0, [a], root=output("a", [s, 8], "attn", 0)),
              group(1, [seed], root=output("seed", [4, 8], "attn", 6)),
              group(2, [b], root=root("b", [4, 8])),
              group(3, [c], root=output("c", [4, 8], "attn_1", 0))]
    kept = _without_own_kernel(groups)
    assert kept[2] is groups[2] and kept[3] is groups[3]
    assert [g.root.out_overload for g in kept[:2]] == [None, None]
    assert "only at static sizes" in kept[1].root.why_not_out
    plan = plan_arena(SavedSet((a, seed, b, c), tuple(kept)))
    assert [p.write.name for p in plan.placements] == ["COPY", "COPY", "OUT", "OUT"], plan


def test_the_backend_tells_collect_which_kernels_run(monkeypatch):
    """The compile passes options.kernels to collect_saved, which keeps fxslots' attention
    ops of symbolic size out of a graph Inductor compiles."""
    import fxslots
    from fxslots import backend

    seen = []
    real = backend.collect_saved
    monkeypatch.setattr(backend, "collect_saved",
                        lambda *a, **k: seen.append(a[4] if len(a) > 4 else k) or real(*a, **k))
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 1))
    fxslots.explain(model, torch.randn(4, 8), kernels="inductor")
    assert seen == ["inductor"], seen


def test_where_the_kernel_cannot_run_attention_runs_pytorch_kernel_and_a_copy(monkeypatch):
    """A Triton that cannot build the kernel (another version, another device) must not stop
    training once the graph calls fxslots' op: the op's own kernel runs instead and its output
    and logsumexp are copied in, with one warning, and the kernel is not tried again."""
    tries = []

    def broken(*args):
        tries.append(1)
        raise RuntimeError("PassManager::run failed\nmore")

    def pytorch_op(q, k, v, bias, compute_lse, dropout_p, causal, *, scale):
        s = (q @ k.transpose(-1, -2)) * scale
        return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)

    monkeypatch.setattr(attention, "_launch", broken)
    monkeypatch.setattr(attention, "_failed", [])
    q, k, v = (torch.randn(2, 3, 5, 4) for _ in range(3))
    o, lse = torch.empty(2, 3, 5, 4), torch.empty(2, 3, 5)
    import fxslots

    with pytest.warns(UserWarning, match="without its attention kernel, which failed "
                                         ".RuntimeError: PassManager"):
        attention._compute(pytorch_op, q, k, v, None, True, False, 0.5, o, lse, lse)
    attention._compute(pytorch_op, q, k, v, None, True, False, 0.5, o, lse, lse)
    want = pytorch_op(q, k, v, None, True, 0.0, False, scale=0.5)
    assert tries == [1] and torch.equal(o, want[0]) and torch.equal(lse, want[1])
    assert fxslots.counters["twin_fallbacks"] == 1  # counted with fxslots' other fallbacks


@pytest.mark.parametrize("op,index,dropout,written", [
    (EFFICIENT, 2, 0.0, aten.fill_.Scalar), (EFFICIENT, 3, 0.0, aten.fill_.Scalar),
    (CUDNN, 6, 0.0, aten.fill_.Scalar), (FLASH, 6, 0.0, aten.fill_.Scalar),
    (EFFICIENT, 0, 0.0, aten.copy_.default), (EFFICIENT, 1, 0.0, aten.copy_.default),
    (EFFICIENT, 2, 0.1, aten.copy_.default), (CUDNN, 2, 0.0, aten.copy_.default),
    (FLASH, 6, 0.1, aten.copy_.default), (EFFICIENT, 2, "kwarg 0.1", aten.copy_.default),
    (EFFICIENT, 2, "kwarg 0.0", aten.fill_.Scalar), (EFFICIENT, 2, "node", aten.copy_.default)])
def test_a_dropout_seed_without_dropout_is_zeroed_in_its_slot_not_copied(op, index, dropout,
                                                                         written):
    """Without dropout PyTorch's efficient attention returns its seed and offset as empty host
    tensors where the trace says device tensors, and the kernel Inductor generated to copy one
    into the slot could not launch (H200 run 38a: "CUDA driver error: invalid argument"). The
    backward reads them only with dropout, so their slots are zeroed; every other output of
    the op, and a seed with dropout, is copied."""
    import operator
    from types import SimpleNamespace

    import torch.fx as fx

    from fxslots.passes import rewrite
    from fxslots.schemas import Write

    g = fx.Graph()
    q, slot, p = g.placeholder("q"), g.placeholder("slot"), g.placeholder("p")
    args = (q, q, q) if op is FLASH else (q, q, q, None, True)
    if isinstance(dropout, float):
        call = g.call_function(op, (*args, dropout))
    elif dropout == "node":  # a dropout probability the graph computes: it may not be 0
        call = g.call_function(op, (*args, p))
    else:
        call = g.call_function(op, args, {"dropout_p": float(dropout.split()[1])})
    item = g.call_function(operator.getitem, (call, index))
    g.output((item,))
    p = SimpleNamespace(write=Write.COPY, offset=0, nbytes=8, group=0)
    rewrite._insert_copy(g, item, slot, (), p)
    assert item.next.target is written
    assert item.next.args[0] is slot


def test_a_zeroed_seed_compiles_under_inductor(monkeypatch):
    """The zeros the rewrite writes into a seed's slot are an op Inductor lowers (H200 run 38d:
    aten.zero_ made Inductor refuse the whole forward, "both a fallback and a decomp for same
    op", so llama-large's forward ran with ATen kernels at 1.34x torch.compile's step)."""
    import operator
    from types import SimpleNamespace

    import torch.fx as fx

    from fxslots._torch.inductor import inductor_compile
    from fxslots.passes import rewrite
    from fxslots.schemas import Write

    g = fx.Graph()
    x, slot = g.placeholder("x"), g.placeholder("slot")
    pair = g.call_function(torch.ops.aten.sort.default, (x,))  # stands in for SDPA on CPU
    item = g.call_function(operator.getitem, (pair, 0))
    g.output((g.call_function(aten.mul.Tensor, (item, 2)),))
    monkeypatch.setattr(rewrite, "unread_seed", lambda src: src is item)
    rewrite._insert_copy(g, item, slot, (), SimpleNamespace(write=Write.COPY, offset=0,
                                                            nbytes=8, group=0))
    gm = fx.GraphModule(torch.nn.Module(), g)
    x_value, slot_value = torch.tensor([3.0, 1.0, 2.0]), torch.tensor(7)
    out = inductor_compile(gm, [x_value, slot_value], static_input_idxs=[])(
        [x_value, slot_value])
    assert slot_value.item() == 0 and out[0].tolist() == [2.0, 4.0, 6.0]



@pytest.mark.parametrize("op,dropout,refused", [(EFFICIENT, 0.1, True), (EFFICIENT, 0.0, False),
                                                (CUDNN, 0.1, False)])
def test_efficient_attention_with_dropout_runs_without_slots(op, dropout, refused):
    """With dropout the efficient kernel's backward reads its seed on the host outside a CUDA
    graph (the warm-up) and from device memory inside one, so no slot can hold it: collecting
    such a graph's saved tensors refuses it, naming the node and what to change, and the
    backend runs it without slots. cuDNN's seeds stay on the device, and are slotted."""
    import operator

    import torch.fx as fx

    from fxslots.errors import PassError
    from fxslots.passes.collect import collect_saved

    dtype = torch.bfloat16 if op is CUDNN else torch.float32
    with FakeTensorMode():
        q_val = torch.empty(2, 4, 16, 8, device="cuda", dtype=dtype)
        out_val, seed_val = torch.empty(2, 4, 16, 8, device="cuda", dtype=dtype), torch.empty(
            (), dtype=torch.int64, device="cuda")
    fw = fx.Graph()
    q = fw.placeholder("q")
    q.meta["val"] = q_val
    call = fw.call_function(op, (q, q, q, None, True, dropout))
    out = fw.call_function(operator.getitem, (call, 0))
    seed = fw.call_function(operator.getitem, (call, 6 if op is CUDNN else 2))
    out.meta["val"], seed.meta["val"] = out_val, seed_val
    fw.output((out, seed))
    bw = fx.Graph()
    bw.placeholder("seed").meta["val"] = seed_val
    bw.placeholder("tangent").meta["val"] = out_val
    bw.output((None,))
    gms = [fx.GraphModule(torch.nn.Module(), g) for g in (fw, bw)]
    if not refused:
        assert len(collect_saved(*gms, 1, []).tensors) == 1
        return
    with pytest.raises(PassError, match="set dropout_p to 0, or run SDPA's flash or cuDNN") as e:
        collect_saved(*gms, 1, [])
    assert e.value.node == seed.name


class _DropoutAttention(torch.nn.Module):
    def __init__(self, hidden=64, heads=4):
        super().__init__()
        self.qkv, self.heads = torch.nn.Linear(hidden, 3 * hidden), heads

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.1)
        return y.transpose(1, 2).reshape(b, s, h)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_efficient_attention_with_dropout_trains_without_slots_on_cuda():
    """fp32 SDPA with dropout on the efficient kernel: the graph runs without slots (its
    backward reads the seed on the host outside a CUDA graph), with one warning that says why,
    and training goes on: two steps, finite gradients that change from step to step."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import fxslots

    torch.manual_seed(0)
    model = _DropoutAttention().cuda()
    f = torch.compile(model, backend="fxslots", dynamic=False)
    x = torch.randn(2, 48, 64, device="cuda")
    grads = []
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION), pytest.warns(
            UserWarning, match="dropout_p to 0, or run SDPA's flash or cuDNN backend"):
        for _ in range(2):
            model.zero_grad(set_to_none=True)
            f(x).square().mean().backward()
            grads.append(model.qkv.weight.grad.clone())
    assert fxslots.counters["fallbacks"] == 1
    assert all(torch.isfinite(g).all() for g in grads) and not torch.equal(*grads)
