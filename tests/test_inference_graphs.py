"""Inference graphs' CUDA-graph bookkeeping (runtime/cudagraphs/inference.py) on CPU, with the
stand-in capture of test_graph_executor_cpu: a replay re-runs what the capture ran on the same
tensors. Outputs bitwise aot_eager's, including ones read after later calls (a replay writes
the same pool bytes: a result not copied out would change), staged inputs written back,
buffers updated in place, a moved parameter captured again. The real thing:
tests/test_cuda_inference.py."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import fxslots
from fxslots.runtime.cudagraphs import inference
from tests.test_graph_executor_cpu import _StandInCapturer, _StandInGraph


CAPTURE = {"capture_inference": True}


@pytest.fixture
def stand_in_graphs(monkeypatch):
    monkeypatch.setattr(inference, "captures_on", lambda device, options: True)
    monkeypatch.setattr(inference, "CudaCapturer", _StandInCapturer)
    _StandInGraph.replays = 0
    yield


class Net(nn.Module):
    """Batch norm in training mode (running statistics updated in place) and an input scaled
    in place: mutations each replay must make as the capture did."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin, self.bn, self.out = nn.Linear(16, 32), nn.BatchNorm1d(32), nn.Linear(32, 8)

    def forward(self, x):
        x.mul_(2)
        return self.out(torch.tanh(self.bn(self.lin(x))))


def test_captured_inference_graphs_match_aot_eager(stand_in_graphs):
    fxslots.reset()
    model = Net()
    twin = copy.deepcopy(model)
    ours = torch.compile(model, backend="fxslots", dynamic=False, options=CAPTURE)
    ref = torch.compile(twin, backend="aot_eager", dynamic=False)
    g = torch.Generator().manual_seed(1)
    held = []
    with torch.no_grad():
        for step in range(5):
            for n in (4, 6):
                x = torch.randn(n, 16, generator=g)
                x_ref = x.clone()
                got, want = ours(x), ref(x_ref)
                assert torch.equal(got, want), (step, n)
                assert torch.equal(x, x_ref), f"step {step}: the input's in-place update"
                held.append((got, want.clone()))
    for i, (got, want) in enumerate(held):  # none overwritten by a later replay
        assert torch.equal(got, want), i
    for a, b in zip(model.state_dict().values(), twin.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert fxslots.counters["inference_captures"] == 2
    assert _StandInGraph.replays == 8  # 5 calls a shape: a warm-up, then 4 replays


def test_a_moved_parameter_is_captured_again(stand_in_graphs):
    fxslots.reset()
    model = Net().eval()
    ours = torch.compile(model, backend="fxslots", dynamic=False, options=CAPTURE)
    x = torch.randn(4, 16)
    with torch.no_grad():
        for _ in range(3):
            ours(x.clone())
        model.lin.weight.data = torch.randn_like(model.lin.weight)
        assert torch.equal(ours(x.clone()), model(x.clone()))
        model.lin.weight.data = torch.randn_like(model.lin.weight)  # the last capture
        assert torch.equal(ours(x.clone()), model(x.clone()))
        model.lin.weight.data = torch.randn_like(model.lin.weight)
        with pytest.warns(UserWarning, match="static inputs moved after each of its 3"):
            assert torch.equal(ours(x.clone()), model(x.clone()))
    assert fxslots.counters["inference_captures"] == inference.RECAPTURE_LIMIT
    assert fxslots.counters["uncaptured_graphs"] == 1


def test_a_buffer_the_forward_rebinds_keeps_its_module_named(stand_in_graphs):
    """Found by a review: a buffer the forward rebinds (a step counter) named the module, so
    every call was a new module's first: a warm-up, never a capture, and nothing said so. Its
    parameters name it now: captured, and the moving buffer is found moved at each replay
    until the graph runs uncaptured, with the warning that says why."""
    from tests.test_graph_executor_cpu import _CountsSteps
    fxslots.reset()
    torch.manual_seed(0)
    model = _CountsSteps().eval()
    twin = copy.deepcopy(model)
    ours = torch.compile(model, backend="fxslots", dynamic=False, options=CAPTURE)
    x = torch.randn(4, 8)
    with torch.no_grad(), pytest.warns(UserWarning, match="static inputs moved"):
        for _ in range(8):
            assert torch.equal(ours(x), twin(x))
    assert fxslots.counters["inference_captures"] == inference.RECAPTURE_LIMIT


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):
        return torch.tanh(self.lin(x))


def test_blocks_compiled_one_by_one_capture_an_inference_graph_each(stand_in_graphs):
    """Found by review (session 46): blocks compiled one by one run one inference graph, keyed
    by input shape alone, so each block found the last one's parameters "moved" and captured
    again; after three, that shape ran uncaptured for good, with a warning blaming moving
    parameters. A module (its first static input, by identity) is now part of the key: one
    capture per block, outputs bitwise eager's, and a dead block's graph goes with it."""
    fxslots.reset()
    torch.manual_seed(0)
    blocks = nn.ModuleList(_Block() for _ in range(4))
    ref = copy.deepcopy(blocks)
    for b in blocks:
        b.compile(backend="fxslots", options=CAPTURE)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(4, 16)
            h, want = x, x
            for b, r in zip(blocks, ref, strict=True):
                h, want = b(h), r(want)
            assert torch.equal(h, want)
    assert fxslots.counters["inference_captures"] == len(blocks)
    assert fxslots.counters["uncaptured_graphs"] == 0



def test_an_inference_graph_goes_with_the_module_it_was_captured_for():
    """Its key names the module by the identity of its first static input, which a later
    tensor may reuse: the graph (and its counts) go when that input dies."""
    graphs = inference.InferenceGraphs.__new__(inference.InferenceGraphs)
    graphs.graphs, graphs.warm, graphs.uncaptured = {}, {}, set()
    graphs.captured, graphs._anchors, graphs.static = inference.Counter(), (0, 0), {0}
    weight = nn.Parameter(torch.randn(4))
    key = graphs._key([weight, torch.randn(2)])
    graphs._forget_with([weight], key)
    graphs.graphs[key], graphs.warm[key], graphs.captured[key] = object(), 0, 1
    other = graphs._key([nn.Parameter(torch.randn(4)), torch.randn(2)])
    assert other != key
    del weight
    assert key not in graphs.graphs and key not in graphs.captured and key not in graphs.warm
    shared, own = nn.Parameter(torch.randn(4)), nn.Parameter(torch.randn(4))
    graphs._anchors, graphs.static = (0, 1), {0, 1}  # a first parameter modules share
    key = graphs._key([shared, own, torch.randn(2)])
    graphs._forget_with([shared, own], key)
    graphs.graphs[key] = object()
    del own
    assert key not in graphs.graphs


def test_training_graphs_keep_their_slots_beside_captured_inference(stand_in_graphs):
    """A training forward holds the only slot while evaluations replay: its backward's
    gradients stay aot_eager's."""
    fxslots.reset()
    model = Net().eval()
    twin = copy.deepcopy(model)
    ours = torch.compile(model, backend="fxslots", dynamic=False, options={"slots": 1, **CAPTURE})
    ref = torch.compile(twin, backend="aot_eager", dynamic=False)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        x = torch.randn(4, 16, generator=g)
        outs = [f(x.clone()) for f in (ours, ref)]
        with torch.no_grad():
            for _ in range(3):
                e = torch.randn(6, 16, generator=g)
                assert torch.equal(ours(e.clone()), ref(e.clone()))
        for o in outs:
            o.square().sum().backward()
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)
    assert fxslots.counters["inference_captures"] == 1


def test_inference_graphs_are_captured_unless_turned_off(stand_in_graphs):
    fxslots.reset()
    on = torch.compile(Net().eval(), backend="fxslots", dynamic=False)
    off = torch.compile(Net().eval(), backend="fxslots", dynamic=False,
                        options={"capture_inference": False})
    with torch.no_grad():
        for _ in range(3):
            on(torch.randn(4, 16))
        assert fxslots.counters["inference_captures"] == 1
        for _ in range(3):
            off(torch.randn(4, 16))
    assert fxslots.counters["inference_graphs"] == 2
    assert fxslots.counters["inference_captures"] == 1 and _StandInGraph.replays == 2


def test_prepare_captures_each_evaluation_shape(stand_in_graphs):
    """``fxslots.prepare(..., evaluations=...)`` captures every evaluation shape in eval mode,
    leaves the module's mode and buffers as they were, and the loop after it captures nothing
    and matches aot_eager."""
    fxslots.reset()
    model = Net()
    twin = copy.deepcopy(model)
    ours = torch.compile(model, backend="fxslots", dynamic=False)
    ref = torch.compile(twin, backend="aot_eager", dynamic=False)
    report = fxslots.prepare(ours, [torch.randn(4, 16)],
                             evaluations=[torch.randn(n, 16) for n in (6, 10)])
    assert (report.evaluations, report.inference_captures) == (2, 2), report
    assert "2 evaluations (2 inference graph captures)" in str(report)
    assert model.training and all(m.training for m in model.modules())
    for a, b in zip(model.state_dict().values(), twin.state_dict().values(), strict=True):
        assert torch.equal(a, b), "prepare changed a buffer"
    g = torch.Generator().manual_seed(1)
    for m in (model, twin):
        m.eval()
    with torch.no_grad():
        for n in (6, 10, 6):
            x = torch.randn(n, 16, generator=g)
            assert torch.equal(ours(x.clone()), ref(x.clone()))
    assert fxslots.counters["inference_captures"] == 2, "prepare missed an evaluation shape"


def test_prepare_takes_evaluations_alone(stand_in_graphs):
    fxslots.reset()
    model = Net()
    ours = torch.compile(model, backend="fxslots", dynamic=False)
    report = fxslots.prepare(ours, evaluations=[(torch.randn(6, 16),)], eval_mode=False)
    assert (report.examples, report.captures, report.inference_captures) == (0, 0, 1)
    with torch.no_grad():  # prepared in training mode, so training mode's graph replays
        ours(torch.randn(6, 16))
    assert fxslots.counters["inference_captures"] == 1 and _StandInGraph.replays == 2


@pytest.mark.parametrize("options, how", [
    ({}, "captured as a CUDA graph per input shape"),
    ({"capture_inference": False}, "runs uncaptured: options={'capture_inference': False}"),
])
def test_explain_shows_an_inference_graph_and_how_it_runs(stand_in_graphs, options, how):
    fxslots.reset()
    with torch.no_grad():
        report = fxslots.explain(Net().eval(), torch.randn(4, 16), **options)
    text = str(report)
    assert f"an inference graph (no backward, no slot): {how}" in text, text
    assert "aten.addmm" in text and "backward" not in text.split("slot):")[1]
    assert report.plans == []


def test_explain_on_cpu_says_why_nothing_is_captured():
    fxslots.reset()
    with torch.no_grad():
        text = str(fxslots.explain(Net().eval(), torch.randn(4, 16)))
    assert "runs uncaptured: it runs on cpu" in text, text
