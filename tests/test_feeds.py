"""Whether a backward adds its parameters' gradients into ``.grad`` itself (``runtime.feeds``):
only where nothing else feeds them in the same backward pass. Autograd sums every share first and
adds once; an in-graph add of one share before autograd's add of another rounds differently, an
ulp off eager. Each test is bitwise eager's, and checks the adds stay in the graph where the
parameter has no other feeder."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import fxslots
from fxslots.runtime import variant
from tests.test_graph_executor_cpu import stand_in_graphs  # noqa: F401


def counting_adds(counts: list[int]):
    """``Variant._grad_buffers`` counting into ``counts`` [backwards that added in the graph,
    backwards that could: every .grad there]."""
    buffers = variant.Variant._grad_buffers

    def counted(self, slot):
        grads = buffers(self, slot)
        refs = self.feeds._params.get(slot.index, ()) if slot is not None else ()
        if refs and all(r() is not None and r().grad is not None for r in refs):
            counts[0] += grads is not None
            counts[1] += 1
        return grads

    return counted


@pytest.fixture
def in_graph(monkeypatch):
    counts = [0, 0]
    monkeypatch.setattr(variant.Variant, "_grad_buffers", counting_adds(counts))
    return counts


class _Head(nn.Module):
    def __init__(self, weight):
        super().__init__()
        self.weight = weight  # the embedding's: tied

    def forward(self, h):
        return nn.functional.linear(torch.tanh(h), self.weight)


class _Tied(nn.Module):
    """An eager embedding whose weight a compiled head shares (its forward runs uncompiled)."""

    def __init__(self, compile_head: bool):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.head = _Head(self.emb.weight)
        object.__setattr__(self, "run_head", self.head)
        if compile_head:
            # not a submodule: parameters and state_dict as the eager twin's
            object.__setattr__(self, "run_head", torch.compile(
                self.head, backend="fxslots", options={"slots": 2}))

    def loss(self, ids, penalty):
        return self.run_head(self.emb(ids) * 1.37).logsumexp(-1).mean()


class _Penalised(nn.Module):
    """A compiled MLP whose loss adds a weight penalty computed eagerly (hand-written decay)."""

    def __init__(self, compile_mlp: bool):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))
        object.__setattr__(self, "run_mlp", self.mlp)
        if compile_mlp:
            object.__setattr__(self, "run_mlp", torch.compile(
                self.mlp, backend="fxslots", options={"slots": 2}))

    def loss(self, ids, penalty):
        x = torch.sin(ids.float()[:, :16] * 0.1)
        loss = self.run_mlp(x).square().mean()
        if penalty:
            loss = loss + 1e-3 * sum(p.square().sum() for p in self.mlp.parameters())
        return loss


def _train(make, *, steps, set_to_none, penalised=lambda step: True, exact=lambda step: True):
    """Each step two microbatches in flight (F F B B), the loss ``penalised`` at some steps;
    gradients bitwise the eager twin's after each ``exact`` step."""
    ours, ref = (torch.manual_seed(0) and make(compiled) for compiled in (True, False))
    gen = torch.Generator().manual_seed(1)
    for step in range(steps):
        batches = [torch.randint(0, 50, (4, 16), generator=gen) for _ in range(2)]
        for model in (ours, ref):
            losses = [model.loss(ids, penalised(step)) for ids in batches]
            for loss in losses:
                loss.backward()
        for (name, a), b in zip(ours.named_parameters(), ref.parameters(), strict=True):
            assert not exact(step) or torch.equal(a.grad, b.grad), (
                step, name, (a.grad - b.grad).abs().max())
        for model in (ours, ref):
            model.zero_grad(set_to_none=set_to_none)
    return ours


@pytest.mark.parametrize("set_to_none", [False, True])
@pytest.mark.parametrize("make", [_Tied, _Penalised], ids=["tied-eager-embedding", "penalty"])
def test_a_parameter_eager_code_feeds_too_is_accumulated_by_autograd(make, set_to_none,
                                                                      in_graph):
    """Code outside fxslots uses the parameter in the same loss; only its accumulator's
    inputs show it, which the first backward (every .grad yet to be made) watches. Before
    session 50 the in-graph add came first and autograd's after: an ulp off from the second
    accumulating backward on."""
    keep = _train(make, steps=4, set_to_none=set_to_none)
    assert in_graph[1] > 0 and in_graph[0] == 0, in_graph  # every add left to autograd
    del keep


def test_a_penalty_dropped_lets_backwards_add_in_the_graph_again(in_graph):
    """A step whose first backward makes .grad anew (set_to_none=True) watches again: once the
    penalty is gone the parameters are fed by the compiled graph alone."""
    keep = _train(_Penalised, steps=5, set_to_none=True, penalised=lambda step: step < 2)
    # steps 3-5: the second backward each; not 2 (the penalty), nor 1 (its forwards ran before
    # the backward compiled: which parameters it feeds was unknown)
    assert in_graph == [3, 4], in_graph
    del keep


def test_a_late_feeder_is_seen_within_watch_every_steps(monkeypatch, in_graph):
    """Watching costs a few us a parameter, so after its first backwards a variant watches one
    backward that makes .grad in ``WATCH_EVERY`` (here 4 from the third): a penalty that
    starts at an unwatched step gets one in-graph add (an ulp off there) and is seen at the
    next watched step, whose gradients and all later ones are bitwise eager's."""
    from fxslots.runtime import feeds
    monkeypatch.setattr(feeds, "WATCH_FIRST", 2)
    monkeypatch.setattr(feeds, "WATCH_EVERY", 4)
    keep = _train(_Penalised, steps=6, set_to_none=True, penalised=lambda step: step >= 2,
                  exact=lambda step: step != 2)
    assert in_graph == [2, 5], in_graph  # the second backward of step 1 and of 2 (unwatched)
    del keep


class _Block(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, x):
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln(x))))


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
def test_a_block_that_moves_to_another_graph_keeps_adding_in_the_graph(request, graphs,
                                                                        in_graph):
    """Per-block compile, the bottom block frozen mid-training: block 1 moves from the graph of
    blocks whose input needs a gradient to the graph of a first trainable block. Both graphs
    have fed its parameters, but never in one backward pass since: it keeps adding in the graph
    (before session 50 it left every add to autograd for good and, under CUDA graphs, captured
    its backward again every step: found by a review)."""
    if graphs:
        request.getfixturevalue("stand_in_graphs")
    torch.manual_seed(0)
    ours = nn.ModuleList(_Block() for _ in range(4))
    ref = copy.deepcopy(ours)
    for b in ours:
        b.compile(backend="fxslots", options={"slots": 2})
    gen = torch.Generator().manual_seed(1)
    captures = []
    for step in range(8):
        if step == 3:
            for model in (ours, ref):
                model[0].requires_grad_(False)
        if step == 5:
            in_graph[:] = [0, 0]
        before = fxslots.counters["captures"]
        xs = [torch.randn(4, 16, generator=gen) for _ in range(2)]
        for model in (ours, ref):
            outs = []
            for x in xs:
                for b in model:
                    x = b(x)
                outs.append(x)
            for o in outs:
                o.square().mean().backward()
        for (name, a), b in zip(ours.named_parameters(), ref.parameters(), strict=True):
            assert (a.grad is None) == (b.grad is None) and (
                a.grad is None or torch.equal(a.grad, b.grad)), (step, name)
        for model in (ours, ref):
            model.zero_grad(set_to_none=True)
        captures.append(fxslots.counters["captures"] - before)
    assert in_graph == [9, 9], in_graph  # steps 6-8: three blocks' second backward each
    if graphs:
        assert captures[5:] == [0, 0, 0], captures


@pytest.mark.parametrize("eager_use", [False, True], ids=["alone", "embedding-too"])
def test_a_watched_gradient_is_held_so_a_sum_never_keeps_its_address(eager_use):
    """The engine adds a second gradient into the first one's memory when it holds the last
    reference to it; the accumulator's input would then have this backward's address though
    it is a sum. ``watch_accumulators`` holds the gradient until the accumulator runs."""
    from fxslots import _torch
    reports = []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return x @ w.t()

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            gw = g.flatten(0, -2).t() @ x.flatten(0, -2)
            _torch.watch_accumulators([w], [gw], lambda p, shared: reports.append(shared))
            return g @ w, gw

    emb = nn.Embedding(50, 16)
    ids = torch.randint(0, 50, (4, 8))
    h = emb(ids) * 1.5 if eager_use else torch.randn(4, 8, 16)
    Probe.apply(h, emb.weight).sum().backward()
    assert reports == [eager_use]


def test_a_feeder_that_starts_and_stops_with_grad_kept_is_seen(monkeypatch, in_graph):
    """Found by a review (session 50): with ``.grad`` kept (``zero_grad(set_to_none=False)``)
    no backward makes ``.grad``, so a penalty that started after the first step was never
    seen: every later step 7e-9 to 3e-8 off eager. A backward that adds into ``.grad`` itself
    now watches whether the accumulators get a gradient anyway: the step the penalty starts
    is an ulp off (its in-graph add came first), every later one bitwise eager's; once it
    stops, a watched backward finds the parameters alone and the adds return to the graph."""
    from fxslots.runtime import feeds
    monkeypatch.setattr(feeds, "WATCH_FIRST", 2)
    monkeypatch.setattr(feeds, "WATCH_EVERY", 2)
    keep = _train(_Penalised, steps=8, set_to_none=False, penalised=lambda step: 2 <= step < 5,
                  exact=lambda step: step != 2)
    # steps 1-7, two backwards each (14); in the graph: steps 1 and 2 (step 2's second
    # backward, watched, saw the penalty), and steps 6-7 (step 5's second backward, a recheck,
    # found the parameters alone)
    assert in_graph == [8, 14], in_graph
    del keep


def test_a_non_leaf_in_a_parameters_place_is_not_asked_for_grad():
    """Found by a review (session 51): ``functional_call`` with a noised weight (a non-leaf in
    the parameter's place) made fxslots read that tensor's ``.grad``, and torch warned at every
    backward. No warning now; every gradient bitwise aot_eager's."""
    import warnings

    from torch.func import functional_call

    from tests.helpers import compiled_twins
    ours, ref, f, g = compiled_twins(lambda: nn.Sequential(nn.Linear(8, 16), nn.Tanh(),
                                                           nn.Linear(16, 4)))
    gen = torch.Generator().manual_seed(1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(3):
            noise, x = torch.randn(16, 8, generator=gen) * 0.01, torch.randn(4, 8, generator=gen)
            for model, run in ((ours, f), (ref, g)):
                w = model[0].weight + noise
                functional_call(run, {"0.weight": w}, (x,)).square().sum().backward()
    ours_warned = [str(w.message)[:60] for w in seen if "/fxslots/" in w.filename]
    assert not ours_warned, ours_warned  # (Dynamo's tracing reads .grad too, for both)
    for a, b in zip(ours.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)
