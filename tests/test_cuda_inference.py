"""Inference graphs (forwards under no_grad or inference_mode) as CUDA graphs on the shared pool:
one capture per input shape after an uncaptured run, inputs staged, outputs copied out of the
pool, parameters read where they are (and a capture again where one moved)."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

import fxslots

pytestmark = pytest.mark.cuda
CAPTURE = {"capture_inference": True}


def _mlp(**kw) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64), **kw).cuda()


@pytest.mark.parametrize("kernels", ["aten", "inductor"])
@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode],
                         ids=["no_grad", "inference_mode"])
def test_evaluation_between_training_steps_is_captured(kernels, mode):
    """Two eval shapes between training steps with an optimizer: outputs equal eager's (read
    after later calls, so none was overwritten by a replay), one capture per shape, and the
    trained parameters bitwise those of the same compiled model trained without evaluations
    (within rounding of eager's: Inductor's fused kernels round differently, run 61b)."""
    fxslots.reset()
    model = _mlp()
    alone, eager = copy.deepcopy(model), copy.deepcopy(model)
    opts = {"kernels": kernels, "strict": True, **CAPTURE}
    c, c_alone = (torch.compile(m, backend="fxslots", dynamic=False, options=opts)
                  for m in (model, alone))
    sgd = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, alone, eager)]
    g = torch.Generator(device="cuda").manual_seed(1)
    for step in range(4):
        x = torch.randn(8, 64, device="cuda", generator=g)
        for m, opt in zip((c, c_alone, eager), sgd, strict=True):
            m(x).square().mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        evals = [torch.randn(n, 64, device="cuda", generator=g) for n in (16, 32, 16)]
        with mode():
            got = [c(e) for e in evals]
            want = [eager(e) for e in evals]
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5,
                                       msg=lambda s, k=step, j=i: f"step {k}, eval {j}: {s}")
    for p, q, r in zip(*(m.parameters() for m in (model, alone, eager)), strict=True):
        assert torch.equal(p, q), (p - q).abs().max()
        torch.testing.assert_close(p, r, rtol=1e-5, atol=1e-5)
    assert fxslots.counters["inference_captures"] == 2, dict(fxslots.counters)
    assert fxslots.counters["uncaptured_graphs"] == 0


def test_a_parameter_that_moved_is_read_where_it_is_now():
    """A parameter whose storage is replaced (``.data = ...``) between evaluations: the graph
    captured over the old address is captured again, and reads the new values."""
    fxslots.reset()
    model = _mlp()
    c = torch.compile(model, backend="fxslots", dynamic=False, options=CAPTURE)
    x = torch.randn(8, 64, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            c(x)
        model[0].weight.data = torch.randn_like(model[0].weight)
        got = c(x)
        torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)
    assert fxslots.counters["inference_captures"] == 2


class _Stats(nn.Module):
    """Batch norm in training mode (running statistics updated in place) and an input
    scaled in place: mutations a replay must make too."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin, self.bn = nn.Linear(32, 32), nn.BatchNorm1d(32)

    def forward(self, x):
        x.mul_(2)
        return self.bn(self.lin(x))


def test_mutated_buffers_and_inputs_under_no_grad():
    fxslots.reset()
    model = _Stats().cuda()
    eager = copy.deepcopy(model)
    c = torch.compile(model, backend="fxslots", dynamic=False, options=CAPTURE)
    g = torch.Generator(device="cuda").manual_seed(1)
    with torch.no_grad():
        for step in range(4):
            x = torch.randn(16, 32, device="cuda", generator=g)
            x2 = x.clone()
            torch.testing.assert_close(c(x), eager(x2), rtol=1e-5, atol=1e-5)
            assert torch.equal(x, x2), f"step {step}: the input's in-place update"
    torch.testing.assert_close(model.bn.running_mean, eager.bn.running_mean)
    torch.testing.assert_close(model.bn.running_var, eager.bn.running_var)
    assert fxslots.counters["inference_captures"] == 1


def test_dropout_draws_new_masks_at_each_replay():
    fxslots.reset()
    model = _mlp().train()
    c = torch.compile(nn.Sequential(model, nn.Dropout(0.5)), backend="fxslots", dynamic=False,
                      options=CAPTURE)
    x = torch.randn(8, 64, device="cuda")
    with torch.no_grad():
        masks = [c(x) == 0 for _ in range(4)]
    kept = torch.stack([1 - m.float().mean() for m in masks])
    assert ((kept - 0.5).abs() < 0.1).all(), kept
    assert not torch.equal(masks[2], masks[3]), "two replays drew one mask"
    assert fxslots.counters["inference_captures"] == 1


class _Syncs(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):
        from tests.test_cuda_reliability import host_sync

        return host_sync(self.lin(x))


def test_a_failed_capture_runs_uncaptured_or_raises():
    """A host sync in an inference graph fails its capture: with on_capture_failure="eager"
    a warning and the graph runs uncaptured from then on; by default an error naming the
    option. The device stays usable either way."""
    fxslots.reset()
    model = _Syncs().cuda()
    x = torch.randn(4, 16, device="cuda")
    c = torch.compile(model, backend="fxslots", dynamic=False,
                      options={"on_capture_failure": "eager", **CAPTURE})
    with torch.no_grad(), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        outs = [c(x) for _ in range(3)]
    assert any("inference graph" in str(w.message) for w in seen), [str(w.message) for w in seen]
    for o in outs:
        torch.testing.assert_close(o, model(x))
    fxslots.reset()
    c = torch.compile(model, backend="fxslots", dynamic=False, options=CAPTURE)
    with torch.no_grad(), pytest.raises(fxslots.CaptureError, match="on_capture_failure"):
        for _ in range(2):
            c(x)
    with torch.no_grad():
        torch.testing.assert_close(model(x), model(x))


@pytest.mark.parametrize("kernels", ["aten", "inductor"])
def test_prepare_captures_the_evaluations_before_training(kernels):
    """``fxslots.prepare(..., evaluations=...)``: every evaluation shape captured up front, in
    eval mode (dropout off), also under Inductor (whose first call compiles); the loop after
    it captures nothing, and its evaluations equal eager's."""
    fxslots.reset()
    model = nn.Sequential(_mlp(), nn.Dropout(0.5))
    eager = copy.deepcopy(model)
    c = torch.compile(model, backend="fxslots", dynamic=False, options={"kernels": kernels})
    g = torch.Generator(device="cuda").manual_seed(1)
    report = fxslots.prepare(c, [torch.randn(8, 64, device="cuda")],
                             evaluations=[torch.randn(n, 64, device="cuda") for n in (16, 32)])
    assert report.inference_captures == 2 and report.captures > 0, report
    captures, evals = fxslots.counters["captures"], fxslots.counters["inference_captures"]
    for _ in range(2):
        c(torch.randn(8, 64, device="cuda", generator=g)).sum().backward()
        for m in (model, eager):
            m.eval()
        with torch.no_grad():
            for n in (16, 32):
                e = torch.randn(n, 64, device="cuda", generator=g)
                torch.testing.assert_close(c(e), eager(e), rtol=1e-5, atol=1e-5)
        for m in (model, eager):
            m.train()
    assert fxslots.counters["inference_captures"] == evals, "prepare missed an evaluation"
    assert fxslots.counters["captures"] == captures, "prepare missed a training graph"


def test_explain_says_an_inference_graph_is_captured():
    fxslots.reset()
    with torch.no_grad():
        text = str(fxslots.explain(_mlp(), torch.randn(8, 64, device="cuda")))
    assert "an inference graph (no backward, no slot): captured as a CUDA graph" in text, text
