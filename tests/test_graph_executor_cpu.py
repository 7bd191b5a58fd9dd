"""The CUDA-graph executor's bookkeeping, run on CPU with a stand-in for the graph itself.

CUDA graphs cannot run here. This stand-in records what a capture ran and re-runs it on the
same tensors at each replay (writing fresh results into the captured outputs, as a replay writes
into the same addresses), so staging, keys, slot and host outputs rebuilt over each forward's
alias, pool outputs copied out, write-back of mutated inputs and backward reloads are all checked
against aot_eager bitwise. The real thing runs in tests/test_cuda.py on a GPU.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import fxslots
from fxslots import backend, cudagraphs
from examples.models import MLP, Attention
from tests.helpers import assert_same, run, schedule_1f1b, schedule_ffbb
from tests.test_golden import InPlaceInput


class _StandInGraph:
    replays = 0
    capturing: "_StandInGraph | None" = None

    def __init__(self):
        self.rerun = None
        self.outs = None

    def replay(self):
        _StandInGraph.replays += 1
        for old, new in zip(self.outs, self.rerun(), strict=True):
            if isinstance(old, torch.Tensor) and old.data_ptr() != new.data_ptr():
                old.copy_(new)


class _RecordingTracker(cudagraphs._NodeTracker):
    def run(self, *args):
        # A capture records kernels without running them: undo what running them wrote.
        before = [(a, a.clone()) for a in args if isinstance(a, torch.Tensor)]
        outs = super().run(*args)
        for a, b in before:
            if not torch.equal(a, b):
                a.data.copy_(b)  # .data: no version bump, as a capture bumps none
        graph = _StandInGraph.capturing
        graph.rerun = lambda: torch.fx.Interpreter(self.module).run(*args)
        graph.outs = outs  # a real graph keeps its outputs' bytes; so does the stand-in
        return outs


@contextlib.contextmanager
def _capture(graph, pool=None):
    _StandInGraph.capturing = graph
    try:
        yield
    finally:
        _StandInGraph.capturing = None


@pytest.fixture
def stand_in_graphs(monkeypatch):
    monkeypatch.setattr(backend, "_use_graphs", lambda device, options: True)
    monkeypatch.setattr(cudagraphs, "shared_pool", lambda device: None)
    monkeypatch.setattr(cudagraphs, "_NodeTracker", _RecordingTracker)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", _StandInGraph)
    monkeypatch.setattr(torch.cuda, "graph", _capture)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    _StandInGraph.replays = 0
    yield


@pytest.mark.parametrize("options", [{}, {"offload": "all"}, {"offload": "above:600"}],
                         ids=["slots", "offload-all", "offload-some"])
@pytest.mark.parametrize("model_name", ["mlp", "attention"])
def test_executor_matches_aot_eager(stand_in_graphs, model_name, options):
    torch.manual_seed(0)
    model, shape = (MLP(16, 32, 3), (4, 16)) if model_name == "mlp" else (Attention(16, 2),
                                                                           (2, 4, 16))
    xs = [torch.randn(*shape) for _ in range(4)]
    sched = schedule_ffbb(2) + [(op, i + 2) for op, i in schedule_1f1b(2, 2)]
    ours = run(model, "fxslots", xs, sched, steps=3, set_to_none=False,
               options={"slots": 2, **options})
    assert backend.counters["captures"] > 0 and _StandInGraph.replays > 0
    assert_same(ours, run(model, "aot_eager", xs, sched, steps=3, set_to_none=False))


def test_mutated_staged_input_reaches_the_caller(stand_in_graphs):
    torch.manual_seed(0)
    model = InPlaceInput()
    eager = InPlaceInput()
    eager.load_state_dict(model.state_dict())
    f = torch.compile(model, backend="fxslots", options={"slots": 1})
    for _ in range(4):  # warm-up, capture, replays
        x = torch.randn(4, 8)
        xe, xo = x.clone(), x.clone()
        eager(xe).sum().backward()
        f(xo).sum().backward()
        assert torch.equal(xo, xe)
    assert _StandInGraph.replays > 0
    for a, b in zip(eager.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-6, rtol=1e-6)


def test_a_bigger_variant_drops_the_graphs_of_the_slot_it_grows(stand_in_graphs):
    m = torch.compile(MLP(), backend="fxslots", options={"slots": 1})
    for rows in (4, 4, 4, 16, 16, 16):
        m(torch.randn(rows, 16)).sum().backward()
    ring = next(r for r in backend._rings.values() if r.slots)
    keys = [k for ref in ring.variants for k in ref().executor.graphs]
    assert keys and all(k[2][0] == ring.slots[0].generation for k in keys)
    fxslots.reset()


def test_dynamic_shapes_capture_one_graph_per_concrete_shape(stand_in_graphs):
    torch.manual_seed(0)
    model = MLP(16, 32, 2)
    xs = [torch.randn(rows, 16) for rows in (3, 5, 7, 5, 3, 7)]
    sched = [op for i in range(6) for op in (("F", i), ("B", i))]
    ours = run(model, "fxslots", xs, sched, steps=2, dynamic=True, set_to_none=False,
               options={"slots": 1, "debug": True})
    assert_same(ours, run(model, "aot_eager", xs, sched, steps=2, dynamic=True,
                          set_to_none=False))
    assert _StandInGraph.replays > 0
