"""Random ops inside activation checkpointing, on CUDA, through real CUDA graphs.

On CUDA, AOTAutograd hands each checkpointed random op's forward and backward a generator of
their own (graph-safe RNG functionalization): the backward's recompute must draw what its own
forward drew, with several forwards in flight and backwards in any order, and each replay must
draw fresh numbers. SDPA's kernels are random ops too (tagged so, whatever their dropout), so
every checkpointed attention block takes this path.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

import fxslots
from tests.helpers import schedule_ffbb, schedule_reverse

pytestmark = pytest.mark.cuda

P = 0.5


class CheckpointedDropout(nn.Module):
    def __init__(self, width: int = 64):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(width, width)

    def forward(self, x):
        return checkpoint(lambda y: F.dropout(self.lin(y), P, training=True), x,
                          use_reentrant=False)


def _expected_grads(lin: nn.Linear, xs, ys, gs) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of sum((y * g).sum()) over microbatches, from the mask each forward's
    output shows (a dropped element is 0; a kept one is lin(x) / (1 - P), never exactly 0):
    what the backward computes if its recompute draws its forward's mask."""
    grad_w = torch.zeros_like(lin.weight)
    grad_b = torch.zeros_like(lin.bias)
    for x, y, g in zip(xs, ys, gs, strict=True):
        d = (g * (y != 0) / (1 - P)).flatten(0, -2)
        grad_w += d.T @ x.flatten(0, -2)
        grad_b += d.sum(0)
    return grad_w, grad_b


@pytest.mark.parametrize("kernels", ["aten", "inductor"])
@pytest.mark.parametrize("order", ["ffbb", "reverse"])
def test_checkpointed_dropout_is_captured_and_recomputes_its_forwards_mask(kernels, order):
    """Two microbatches in flight, their backwards in order and reversed, three steps: every
    backward's gradients follow the mask its own forward's output shows, each step draws new
    masks, and the graphs are captured (none runs uncaptured, nothing falls back)."""
    fxslots.reset()
    m = CheckpointedDropout().cuda()
    f = torch.compile(m, backend="fxslots",
                      options={"slots": 2, "kernels": kernels, "strict": True})
    sched = schedule_ffbb(2) if order == "ffbb" else schedule_reverse(2)
    g = torch.Generator(device="cuda").manual_seed(1)
    xs = [torch.randn(4, 32, 64, device="cuda", generator=g) for _ in range(2)]
    gs = [torch.randn(4, 32, 64, device="cuda", generator=g) for _ in range(2)]
    masks = []
    for step in range(4):
        ys, pending = {}, {}
        for op, i in sched:
            if op == "F":
                pending[i] = f(xs[i])
                ys[i] = pending[i].detach().clone()
            else:
                (pending.pop(i) * gs[i]).sum().backward()
        want_w, want_b = _expected_grads(m.lin, xs, [ys[0], ys[1]], gs)
        torch.testing.assert_close(m.lin.weight.grad, want_w, rtol=1e-5, atol=1e-5,
                                   msg=lambda s, k=step: f"step {k}, weight: {s}")
        torch.testing.assert_close(m.lin.bias.grad, want_b, rtol=1e-5, atol=1e-5,
                                   msg=lambda s, k=step: f"step {k}, bias: {s}")
        masks.append([(ys[i] != 0) for i in range(2)])
        m.zero_grad(set_to_none=True)
    kept = torch.stack([mk.float().mean() for step in masks for mk in step])
    assert ((kept - (1 - P)).abs() < 0.05).all(), kept  # dropout, at its rate
    for a, b in zip(masks, masks[1:]):
        assert not torch.equal(a[0], b[0]), "a step drew its previous step's mask again"
    assert not torch.equal(masks[0][0], masks[0][1]), "both microbatches drew one mask"
    assert fxslots.counters["captures"] > 0
    assert fxslots.counters["uncaptured_graphs"] == 0 and fxslots.counters["fallbacks"] == 0


@pytest.mark.parametrize("family,kernels", [("llama", "aten"), ("bert", "aten"),
                                            ("t5", "aten"), ("llama", "inductor")])
def test_checkpointed_transformers_run_under_cuda_graphs(family, kernels):
    """transformers' models with activation checkpointing (SDPA a random op in every
    checkpointed layer), dropout off, fp32, two shapes, four microbatches in flight: outputs
    and gradients as the same compile without slots (aot_eager, or torch.compile's default
    for Inductor's kernels), every graph captured."""
    from tests import zoo

    model = zoo.build(family, True, dropout=0.0).cuda()
    xs = [x.cuda() for x in zoo.inputs(family)] * 2
    options = {"slots": 4, "kernels": kernels, "strict": True}
    ours = zoo.train(model, "fxslots", xs, dynamic=False, options=options)
    captures, uncaptured = fxslots.counters["captures"], fxslots.counters["uncaptured_graphs"]
    ref = zoo.train(model, "inductor" if kernels == "inductor" else "aot_eager", xs,
                    dynamic=False)
    assert captures > 0 and uncaptured == 0 and ours.fallbacks == [], (captures, uncaptured)
    for what, a, b in (("output", ours.outputs, ref.outputs), ("grad", ours.grads, ref.grads)):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert (x is None) == (y is None), f"{what} {i}"
            if x is not None:
                torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6,
                                           msg=lambda s, w=what, j=i: f"{w} {j}: {s}")


class CheckpointedDropoutThatSyncs(CheckpointedDropout):
    """A checkpointed dropout, then a host sync: a capture of its forward fails after the
    generators AOTAutograd hands it were registered."""

    def forward(self, x):
        from tests.test_cuda_reliability import host_sync

        return host_sync(super().forward(x))


def test_a_failed_capture_takes_the_checkpoint_generators_out_of_capture_mode():
    """A failed capture never reaches the capture epilogue of the generators it registered
    (torch before 2.14): unless recovery ends their capture, the same generators raise
    "Offset increment outside graph capture" when the forward then runs uncaptured
    (on_capture_failure="eager"), and at every replay of the graphs that share them. Training
    goes on uncaptured, each backward recomputing its forward's mask."""
    fxslots.reset()
    m = CheckpointedDropoutThatSyncs().cuda()
    f = torch.compile(m, backend="fxslots", options={"slots": 1, "on_capture_failure": "eager"})
    g = torch.Generator(device="cuda").manual_seed(1)
    x, grad = (torch.randn(4, 32, 64, device="cuda", generator=g) for _ in range(2))
    for step in range(4):  # warm-up, the failed capture, then uncaptured
        y = f(x)
        out = y.detach().clone()
        (y * grad).sum().backward()
        want_w, _ = _expected_grads(m.lin, [x], [out], [grad])
        torch.testing.assert_close(m.lin.weight.grad, want_w, rtol=1e-5, atol=1e-5,
                                   msg=lambda s, k=step: f"step {k}: {s}")
        m.zero_grad(set_to_none=True)
    assert fxslots.counters["capture_failures"] >= 1
    F.dropout(torch.ones(4, device="cuda"), 0.5)  # the default generator left capture too


def _draws_then_syncs(gen: torch.Generator) -> float:
    torch.rand(4, device="cuda", generator=gen)
    torch.rand(4, device="cuda")
    return torch.zeros(1, device="cuda").item()  # a host sync: the capture fails


def test_recovery_ends_the_capture_of_a_generator_that_drew_in_the_failed_capture():
    """The capturer driven directly with a generator among its arguments, drawn from inside a
    capture that a host sync then fails: on torch 2.11 it stays in capture mode (its next draw
    outside a graph raises "Offset increment outside graph capture") unless recovery's probe
    capture registers it too (run 62a, rng_probe.py). Afterwards it and the default generator
    draw outside graphs again."""
    from fxslots.runtime.cudagraphs.pool import CaptureFailed, CudaCapturer

    fxslots.reset()
    torch.cuda.init()
    gen = torch.cuda.default_generators[torch.cuda.current_device()].clone_state()
    with pytest.raises(CaptureFailed):
        CudaCapturer(torch.device("cuda")).capture(_draws_then_syncs, [gen])
    torch.rand(4, device="cuda", generator=gen)
    torch.rand(4, device="cuda")
    torch.cuda.synchronize()


class CheckpointedAttentionDropout(nn.Module):
    """Checkpointed bf16 attention with dropout whose values are the identity: each head's
    output is its dropped-out attention matrix, so the value's gradient, the sum over heads of
    output^T @ grad, shows whether the backward's recompute drew its forward's mask."""

    def __init__(self, seq: int = 64, heads: int = 4):
        super().__init__()
        torch.manual_seed(0)
        self.heads, self.seq = heads, seq
        self.qk = nn.Linear(seq, 2 * heads * seq, dtype=torch.bfloat16)
        self.v = nn.Parameter(torch.eye(seq, dtype=torch.bfloat16))

    def attend(self, x):
        b = x.shape[0]
        q, k = self.qk(x).view(b, self.seq, 2, self.heads, self.seq).permute(2, 0, 3, 1, 4)
        # dense: a stride-0 value trips Inductor's size/stride check of the flash backward
        # (torch 2.11: its fake kernel's grad_v is empty_like(value), the kernel's is not)
        v = self.v.expand(b, self.heads, self.seq, self.seq).contiguous()
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.3)

    def forward(self, x):
        return checkpoint(self.attend, x, use_reentrant=False)


def _mask_error(y: torch.Tensor, g: torch.Tensor, grad_v: torch.Tensor) -> float:
    want = (y.float().transpose(-1, -2) @ g.float()).sum((0, 1))
    return ((grad_v.float() - want).norm() / want.norm()).item()


_SDPA = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
         "cudnn": "CUDNN_ATTENTION"}


@pytest.mark.parametrize("backend,kernels", [("flash", "aten"), ("flash", "inductor"),
                                             ("efficient", "aten"), ("cudnn", "aten")])
def test_checkpointed_attention_dropout_recomputes_its_forwards_mask(backend, kernels):
    """SDPA with dropout 0.3 in a checkpointed block (BERT's and T5's default), bf16, two
    microbatches in flight with their backwards reversed, three steps: each backward's value
    gradient is what its forward's dropped-out attention gives, the masks change from step to
    step and between microbatches, and eager passes the same check (so the check can fail)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    fxslots.reset()
    m = CheckpointedAttentionDropout().cuda()
    gen = torch.Generator(device="cuda").manual_seed(1)
    xs = [torch.randn(2, 64, 64, device="cuda", generator=gen, dtype=torch.bfloat16)
          for _ in range(2)]
    gs = [torch.randn(2, 4, 64, 64, device="cuda", generator=gen, dtype=torch.bfloat16)
          for _ in range(2)]
    with sdpa_kernel(getattr(SDPBackend, _SDPA[backend])):
        try:
            y = m(xs[0])
        except RuntimeError as e:  # this torch or GPU has no such kernel with dropout
            pytest.skip(f"{backend} attention with dropout: {e}"[:200])
        (y * gs[0]).sum().backward()
        assert _mask_error(y, gs[0], m.v.grad) < 0.02, "eager fails the check"
        m.zero_grad(set_to_none=True)
        f = torch.compile(m, backend="fxslots", options={"slots": 2, "kernels": kernels})
        masks = []
        for step in range(3):
            ys = [f(x) for x in xs]
            errors = []
            for y, g in reversed(list(zip(ys, gs, strict=True))):
                (y * g).sum().backward()
                errors.append(_mask_error(y, g, m.v.grad))
                m.zero_grad(set_to_none=True)
            assert max(errors) < 0.02, (step, errors)
            masks.append([y == 0 for y in ys])
    kept = torch.stack([1 - mk.float().mean() for step in masks for mk in step])
    assert ((kept - 0.7).abs() < 0.05).all(), kept
    assert not torch.equal(masks[0][0], masks[1][0]), "a step drew its previous step's mask"
    assert not torch.equal(masks[0][0], masks[0][1]), "both microbatches drew one mask"
    print(f"{backend}/{kernels}: captures {fxslots.counters['captures']}, uncaptured "
          f"{fxslots.counters['uncaptured_graphs']}, fallbacks {fxslots.counters['fallbacks']}")
