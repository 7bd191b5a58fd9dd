"""A saved log-softmax's input computed in the slot bytes the log-softmax then writes over
(``passes/share.py``): where it is and is not, pinned in the forward's printout, and trained
bitwise against eager."""

from __future__ import annotations

import copy

import pytest
import torch
from expecttest import assert_expected_inline
from torch import nn

import fxslots
from fxslots import rowwise


class _Loss(nn.Module):
    """Logits in ``dtype``, a log-softmax in float32 over ``dim``, a loss over it; ``also``
    reads the float32 logits a second time."""

    def __init__(self, dtype=torch.bfloat16, dim=-1, also=False):
        super().__init__()
        self.out = nn.Linear(64, 256, bias=False, dtype=dtype)
        self.dim, self.also = dim, also

    def forward(self, x, targets):
        logits = self.out(x).float()
        loss = nn.functional.nll_loss(logits.log_softmax(self.dim).flatten(0, -2), targets)
        return loss + logits.mean() if self.also else loss


def _forward_lines(model, x, t) -> list[str]:
    text = str(fxslots.explain(copy.deepcopy(model), x, t))
    forward = text[:text.index("----- backward")]
    lines = [line.strip().split("  #")[0].rstrip(",") for line in forward.splitlines()]
    return [line for line in lines
            if line.split(":")[0] in ("slot__log_softmax", "_to_copy", "mm", "_log_softmax")]


def _train_bitwise(model, x, t, steps=3):
    e = copy.deepcopy(model)
    c = torch.compile(model, backend="fxslots", options={"slots": 1})
    for step in range(steps):
        c(x, t).backward()
        e(x, t).backward()
        for p, q in zip(model.parameters(), e.parameters(), strict=True):
            assert torch.equal(p.grad, q.grad), step
        model.zero_grad(set_to_none=True)
        e.zero_grad(set_to_none=True)


def _inputs(dtype=torch.bfloat16):
    torch.manual_seed(0)
    return torch.randn(32, 64, dtype=dtype), torch.randint(0, 256, (32,))


def test_golden_the_float32_logits_are_converted_in_the_log_softmaxs_slot_view():
    x, t = _inputs()
    model = _Loss()
    assert_expected_inline("\n".join(_forward_lines(model, x, t)), """\
slot__log_softmax: f32[32, 256] @ slot byte 0
mm: bf16[32, 256] = aten.mm(primals_2, t)
_to_copy: f32[32, 256] = aten.copy_(slot__log_softmax, mm)
_log_softmax: f32[32, 256] = aten._log_softmax.out(_to_copy, -1, False, out=slot__log_softmax)""")
    _train_bitwise(model, x, t)


@pytest.mark.parametrize("model, why", [
    (_Loss(dim=0), "over the first dimension its kernel reads a column while it writes"),
    (_Loss(also=True), "the float32 logits are read again after it"),
])
def test_an_input_stays_in_the_pool_where_the_log_softmax_could_not_write_over_it(model, why):
    x, t = _inputs()
    lines = _forward_lines(model, x, t)
    assert not any("aten.copy_(slot_" in line for line in lines), (why, lines)
    _train_bitwise(model, x, t)


def test_an_input_stays_in_the_pool_where_this_torch_gives_other_bits(monkeypatch):
    monkeypatch.setattr(rowwise, "_CHECKED", {})
    monkeypatch.setattr(rowwise, "same_bits", lambda run, inputs, over: False)
    x, t = _inputs()
    assert not any("aten.copy_(slot_" in line for line in _forward_lines(_Loss(), x, t))


def test_a_float32_matmul_is_computed_in_the_slot_view_through_its_out_form():
    x, t = _inputs(torch.float32)
    model = _Loss(torch.float32)
    assert any(line.startswith("mm:") and "aten.mm.out(" in line and "out=slot_" in line
               for line in _forward_lines(model, x, t)), _forward_lines(model, x, t)
    _train_bitwise(model, x, t)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("width", [1000, 12000, 50257])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_log_softmax_gives_the_same_bits_over_its_input(dtype, width, device):
    """Each kernel path this torch takes (CUDA: a warp a row up to 1024, a block with the row
    in shared memory where it fits, else from device memory) over rows of a language model's
    vocabulary sizes."""
    torch.manual_seed(0)
    x = torch.randn(64, width, device=device).to(dtype)
    want = torch.ops.aten._log_softmax(x, -1, False)
    got = torch.ops.aten._log_softmax.out(x, -1, False, out=x)
    assert got.data_ptr() == x.data_ptr()
    assert torch.equal(got, want)
    assert rowwise.over_input(torch.ops.aten._log_softmax.default, dtype, width,
                              torch.device(device))


@pytest.mark.cuda
def test_a_shared_slot_view_trains_bitwise_under_cuda_graphs():
    """On CUDA, with the forward and backward replayed as CUDA graphs: the conversion goes to
    the slot view, and every step's gradients are eager's bits."""
    x, t = (a.cuda() for a in _inputs())
    model = _Loss().cuda()
    assert any("aten.copy_(slot_" in line for line in _forward_lines(model, x, t))
    fxslots.reset()
    _train_bitwise(model, x, t, steps=4)
    assert fxslots.counters["captures"] >= 2
