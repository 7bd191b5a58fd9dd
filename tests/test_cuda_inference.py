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
    after later calls, so none was overwritten by a replay), one capture per shape, the
    training graphs' gradients unchanged by the evaluations in between."""
    fxslots.reset()
    model = _mlp()
    eager = copy.deepcopy(model)
    c = torch.compile(model, backend="fxslots", dynamic=False,
                      options={"kernels": kernels, "strict": True, **CAPTURE})
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, eager)]
    g = torch.Generator(device="cuda").manual_seed(1)
    for step in range(4):
        x = torch.randn(8, 64, device="cuda", generator=g)
        for m, opt in zip((c, eager), opts, strict=True):
            m(x).square().sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        evals = [torch.randn(n, 64, device="cuda", generator=g) for n in (16, 32, 16)]
        with mode():
            got = [c(e) for e in evals]
            want = [eager(e) for e in evals]
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5,
                                       msg=lambda s, k=step, j=i: f"step {k}, eval {j}: {s}")
    for p, q in zip(model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5)
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
