"""The CUDA-graph executor's bookkeeping, run on CPU with a stand-in for the graph itself.

CUDA graphs cannot run here. This stand-in records what a capture ran and re-runs it on the
same tensors at each replay (writing fresh results into the captured outputs, as a replay writes
into the same addresses), so staging, keys, slot and host outputs rebuilt over each forward's
alias, pool outputs copied out, write-back of mutated inputs and backward reloads are all checked
against aot_eager bitwise. The real thing runs in tests/test_cuda.py on a GPU.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import os
import warnings
import weakref

import pytest
import torch
from torch import nn

import fxslots
from fxslots import _torch, backend
from fxslots.runtime.cudagraphs import executor
from fxslots.runtime.cudagraphs.outputs import OutKind
from fxslots.runtime.layout import geometry_of, make_views
from fxslots.schemas import Write
from examples.models import MLP, Attention
from tests.helpers import (assert_same, compiled_twins, run, schedule_1f1b, schedule_ffbb,
                           train_twins, train_under_compiled_autograd)
from tests.fuzz_models import RandomDraw, check_case, draw_case
from tests.test_golden import InPlaceInput


class _StandInGraph:
    replays = 0

    def __init__(self, rerun, outs):
        self.rerun, self.outs = rerun, outs

    def replay(self):
        _StandInGraph.replays += 1
        for old, new in zip(self.outs, self.rerun(), strict=True):
            if isinstance(old, torch.Tensor) and old.data_ptr() != new.data_ptr():
                for dim, stride in enumerate(old.stride()):  # an expanded output's one slice
                    if stride == 0:
                        old, new = old.narrow(dim, 0, 1), new.narrow(dim, 0, 1)
                old.copy_(new)


class _StandInCapturer:
    """Replaces ``CudaCapturer``: a capture runs the graph once to learn its outputs, then
    undoes what running it wrote, as a real capture runs nothing."""

    def __init__(self, device, options):
        self.device, self.options = device, options

    def synchronize(self):
        pass

    rooms: list[int] = []  # what each capture was asked to make room for (SharedPool.make_room)

    def capture(self, gm, args, room=0):
        _StandInCapturer.rooms.append(room)
        # A GraphModule, or Inductor's compiled code (kernels="inductor"), run as one call.
        run = gm if not isinstance(gm, torch.fx.GraphModule) else (
            lambda *a: torch.fx.Interpreter(gm).run(*a))
        storages = {a.untyped_storage().data_ptr(): a.untyped_storage() for a in args
                    if isinstance(a, torch.Tensor)}
        before = [(b, b.clone()) for b in (torch.empty(0, dtype=torch.uint8).set_(st)
                                           for st in storages.values())]
        rng = torch.get_rng_state()  # nor does it draw random numbers: replays do
        outs = run(*args)
        torch.set_rng_state(rng)
        for b, saved in before:  # bytes, under the tensors: no version bump, as in a capture
            b.copy_(saved)
        # A real graph keeps addresses, not tensors: neither may the stand-in, or it would keep
        # a forward's alias (and so its slot) alive, which the real thing never does.
        fixed = [_unowned(a) for a in args]
        graph = _StandInGraph(lambda: run(*fixed),
                              [_unowned(o) for o in outs])
        # ... except its pool: outputs outside the slot arenas and output buffers (where a
        # backward delivers gradients, a forward its outputs) stay reserved, as pool memory.
        arenas = {a.data_ptr() for g in fxslots.regions() for sl in g.ring.slots
                  for a in (sl.arena, sl.host_arena) if a is not None}
        arenas |= {b.tensor.data_ptr() for g in fxslots.regions()
                   for b in (*g.outputs.values(), *g.placed_outputs.values(),
                             *(b for banks in g.forward_outputs.values() for b in banks.banks))
                   if b.tensor is not None}
        graph.pool = [o.untyped_storage() for o in outs if isinstance(o, torch.Tensor)
                      and o.untyped_storage().data_ptr() not in arenas]
        return graph, outs


def _unowned(a):
    """The same bytes and geometry over a storage that does not own (or keep alive) them."""
    if not isinstance(a, torch.Tensor):
        return a
    st = a.untyped_storage()
    alias = _torch.storage_alias(st.data_ptr(), a.device, st.nbytes())
    return make_views(alias, a.device, [geometry_of(a)])[0]


@pytest.fixture
def stand_in_graphs(monkeypatch):
    monkeypatch.setattr(backend, "_use_graphs", lambda device, options: True)
    monkeypatch.setattr(executor, "CudaCapturer", _StandInCapturer)
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
    assert fxslots.counters["captures"] > 0 and _StandInGraph.replays > 0
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
    (region,) = [g for g in fxslots.regions() if g.ring.slots]
    keys = [k for v in region.live_variants() for k in v.executor.graphs]
    assert keys and all(k.generation == region.ring.slots[0].generation for k in keys)
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


def test_a_dropped_microbatch_frees_its_slot_under_replay(stand_in_graphs):
    """Replays stage inputs into the slot: what they keep for that must not hold a forward's
    alias, or a microbatch dropped without its backward would keep its slot for ever."""
    torch.manual_seed(0)
    f = torch.compile(MLP(), backend="fxslots", options={"slots": 1})
    x = torch.randn(4, 16)
    f(x).sum().backward()  # warm-up
    for _ in range(3):  # the capture, then replays, each dropped
        out = f(x)
        del out
        assert sum(r.pending() for r in [g.ring for g in fxslots.regions()]) == 0
    assert fxslots.counters["captures"] > 0
    f(x).sum().backward()


@pytest.mark.parametrize("seed", range(int(os.environ.get("FXSLOTS_FUZZ_STAND_IN", "12"))))
def test_fuzz_under_the_stand_in(stand_in_graphs, seed):
    """The schedule fuzzer's grammar through the graph executor (the GPU profile's draws),
    bitwise against aot_eager, so its bookkeeping is fuzzed in CI too."""
    case = draw_case(RandomDraw(10_000 + seed), max_ops=5, max_variants=3, max_schedules=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_case(case, device="cpu", exact=True)


def test_zero_size_and_transposed_inputs_are_staged(stand_in_graphs):
    """A zero-size staged input sits at the same offset as an empty group: the plan checker
    once compared their names to order them (an H200 run found it)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh())
    xs = [torch.randn(8, 12).t() for _ in range(3)] + [torch.randn(0, 8) for _ in range(3)]
    sched = [op for i in range(len(xs)) for op in (("F", i), ("B", i))]
    ours = run(model, "fxslots", xs, sched, steps=1, set_to_none=False, options={"slots": 2})
    assert_same(ours, run(model, "aot_eager", xs, sched, steps=1, set_to_none=False))


@pytest.mark.parametrize("layer", [0, -1], ids=["anchor", "other"])
def test_a_moved_parameter_is_captured_again(stand_in_graphs, caplog, layer):
    """A captured graph points at its static inputs' addresses. A parameter given new memory
    (``p.data = ...``: same object, so Dynamo does not recompile) must make the executor
    capture again, not replay a graph that reads the freed old bytes. The first parameter
    names the module in the capture keys, by identity: found by a review, keyed by its
    address a moved first parameter made new keys every step, so graphs piled up unbounded,
    uncounted and unwarned (FSDP regathers shards at new addresses), and the module's
    forwards in flight escaped ``slots``."""
    torch.manual_seed(0)
    ours, ref = MLP(), MLP()
    ref.load_state_dict(ours.state_dict())
    f = torch.compile(ours, backend="fxslots", options={"slots": 1})
    f_ref = torch.compile(ref, backend="aot_eager")
    xs = [torch.randn(4, 16, generator=torch.Generator().manual_seed(i)) for i in range(8)]
    for i, x in enumerate(xs):
        if i == 3:  # after warm-up, capture and a replay
            captures = fxslots.counters["captures"]
        if i >= 3:  # and at every step after: each replay finds it moved
            for m in (ours, ref):
                with torch.no_grad():
                    m.layers[layer].weight.data = m.layers[layer].weight.data * 2
        outs = [fn(x) for fn in (f, f_ref)]
        assert torch.equal(outs[0], outs[1]), f"step {i}: output differs"
        for o in outs:
            o.sum().backward()
    assert fxslots.counters["captures"] > captures, "the moved parameter was not recaptured"
    for a, b in zip(ours.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)
    region, = fxslots.regions()
    assert sum(len(v.executor.graphs) for v in region.live_variants()) == 2  # a forward, a backward
    # A recapture every step costs a capture every step: counted, and warned about once, when
    # one graph has done it three times (a first .grad buffer moving in warm-up stays quiet).
    assert fxslots.counters["recaptures"] >= 3
    warned = [r.getMessage() for r in caplog.records if "captured again" in r.getMessage()
              and r.levelname == "WARNING"]
    assert len(warned) == 1 and "3 times" in warned[0] and "in place" in warned[0], warned


class _CountsSteps(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros(()))
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        self.steps = self.steps + 1  # a new buffer tensor every step
        return torch.tanh(self.lin(x)) * self.steps


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
def test_a_buffer_the_forward_rebinds_does_not_name_the_module(request, graphs):
    """Found by a review: a buffer the forward rebinds was the first static input, so it
    named the module. Each step its old tensor died and the region took the model for dead:
    the arena was freed and allocated again every step; under CUDA graphs every step
    captured both graphs under a new key, kept the old ones, counted no recapture. The
    module's parameters name it now: bitwise aot_eager's, one arena, two graphs held
    (test_inference_graphs has the inference side)."""
    if graphs:
        request.getfixturevalue("stand_in_graphs")
    twins = compiled_twins(_CountsSteps, {"slots": 1})  # held: the region frees with its model
    train_twins(twins, [torch.randn(4, 8) for _ in range(6)])
    region, = [r for r in fxslots.regions() if r.ring.slots]
    assert region.ring.grow_events == 1 and region.ring.slots[0].arena is not None
    if graphs:
        assert sum(len(v.executor.graphs) for v in region.live_variants()) == 2
    del twins


def test_grad_given_new_memory_each_step_keeps_the_graphs_bounded(stand_in_graphs, caplog):
    """Found by a review: a loop that gives ``.grad`` new memory every step (``p.grad =
    torch.zeros_like(p)``) with two microbatches in flight, where gradients go into the arena:
    the accumulating backward's key holds the ``.grad`` addresses, so every step captured
    under new keys and kept the old graphs (80 after 40 steps), counting no recapture. The
    oldest such graph is dropped and counted now, and the warning names it."""
    torch.manual_seed(0)
    ours, ref = MLP(), MLP()
    ref.load_state_dict(ours.state_dict())
    f = torch.compile(ours, backend="fxslots", options={"slots": 2})
    held = []
    for step in range(12):
        xs = [torch.randn(8, 16, generator=torch.Generator().manual_seed(2 * step + i))
              for i in range(2)]
        for model, fn in ((ours, f), (ref, ref)):
            for out in [fn(x) for x in xs]:
                out.square().mean().backward()
            with torch.no_grad():
                for p in model.parameters():
                    p.sub_(0.1 * p.grad)
                    p.grad = torch.zeros_like(p)
        region, = fxslots.regions()
        held.append(sum(len(v.executor.graphs) for v in region.live_variants()))
    assert all(torch.equal(a, b) for a, b in zip(ours.parameters(), ref.parameters()))
    assert held[-1] == held[5] and fxslots.counters["recaptures"] >= 3, held
    assert any("captured again" in r.getMessage() for r in caplog.records)


def _train_pair(options, steps, between=None, hooks=None, prepared=False):
    """fxslots (stand-in graphs) and aot_eager side by side, one microbatch per step; the
    slot's token recipe after each fxslots forward; ``between(step, models)`` runs after the
    forwards and before the backwards."""
    torch.manual_seed(0)
    ours, ref = MLP(), MLP()
    ref.load_state_dict(ours.state_dict())
    f = torch.compile(ours, backend="fxslots", options={"slots": 1, **options})
    f_ref = torch.compile(ref, backend="aot_eager")
    if prepared:
        fxslots.prepare(f, [torch.randn(4, 16)])
    recipes = []
    for i in range(steps):
        x = torch.randn(4, 16, generator=torch.Generator().manual_seed(i))
        with hooks() if hooks else contextlib.nullcontext():
            outs = [fn(x) for fn in (f, f_ref)]
        (slot,) = [s for g in fxslots.regions() for s in g.ring.slots]
        recipes.append(slot.saved_outs)
        if between:
            between(i, (ours, ref))
        for o in outs:
            o.sum().backward()
    for a, b in zip(ours.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)
    return recipes


def test_replayed_forwards_hand_autograd_one_token_per_arena(stand_in_graphs):
    """After warm-up and capture, a replayed forward hands autograd one tensor over the slot's
    arena in place of every saved view (outputs.Captured.results), and the backward replays
    on it; gradients stay aot_eager's."""
    recipes = _train_pair({}, 5)
    assert recipes[:2] == [None, None] and all(r for r in recipes[2:]), recipes
    assert all(kind is OutKind.SLOT for _, kind, _ in recipes[-1])


def test_after_prepare_tokens_wait_for_a_backward_through_fxslots(stand_in_graphs):
    """``prepare`` captures both directions, yet the first forward after it hands views: only a
    backward of the training loop shows that fxslots runs the backwards (compiled autograd
    around ``loss.backward()`` alone would run its own copy, which cannot read tokens); every
    forward after it replays with tokens."""
    recipes = _train_pair({}, 3, prepared=True)
    assert recipes[0] is None and all(recipes[1:]), recipes


def test_saved_tensor_hooks_see_real_views(stand_in_graphs):
    """Under saved-tensor hooks (save_on_cpu) the hooks pack what the forward saves: views,
    never the arena token (which would pack the whole arena once per saved tensor)."""
    recipes = _train_pair({}, 5, hooks=lambda: torch.autograd.graph.save_on_cpu())
    assert recipes == [None] * 5


@pytest.mark.parametrize("slots", [1, 2])
def test_a_pack_hook_that_copies_saved_tensors_backs_its_own_copies(stand_in_graphs, slots):
    """A pack hook that hands autograd copies (``t.clone()``): the forward's views die with it,
    its slot is free for the next forward at once, and the backward reads the copies where it
    got them (no slot holds them), uncaptured. Three microbatches in flight with one or two
    slots, gradients accumulated over steps, bitwise aot_eager's."""
    torch.manual_seed(0)
    ours, ref = MLP(), MLP()
    ref.load_state_dict(ours.state_dict())
    f = torch.compile(ours, backend="fxslots", options={"slots": slots})
    f_ref = torch.compile(ref, backend="aot_eager")
    for step in range(4):
        xs = [torch.randn(4, 16) for _ in range(3)]
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t.clone(), lambda t: t):
            losses = [[fn(x).square().sum() for x in xs] for fn in (f, f_ref)]
        for a, b in zip(*losses, strict=True):
            assert torch.equal(a, b), step
            a.backward()
            b.backward()
        for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
            assert torch.equal(p.grad, q.grad), step


@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "eager"])
@pytest.mark.parametrize("slots", [1, 2])
@pytest.mark.parametrize("where", ["step", "backward"])
def test_compiled_autograd_runs_the_backward_and_never_exhausts_the_slots(request, caplog,
                                                                          graphs, slots, where):
    """Compiled autograd copies AOTAutograd's backward graph into its own and runs that, not
    fxslots' backward, so no backward gives a slot back; it also keeps the inputs of each
    backward it traces (views of a slot) as long as that trace lives. On for the whole step
    (torchtitan's train context) or only around ``loss.backward()``: every step's gradients
    are bitwise eager's, and the slot held by a traced backward's inputs is left to them
    (one warning) instead of refusing the next forward."""
    if graphs:
        request.getfixturevalue("stand_in_graphs")
    _train_under_compiled_autograd(where, slots, prepared=False)
    assert sum(r.ring.orphans for r in fxslots.regions()) >= 1
    assert len([r for r in caplog.records if "outlived its autograd graph" in r.getMessage()
                and r.levelname == "WARNING"]) == 1


@pytest.mark.parametrize("where", ["step", "backward"])
def test_compiled_autograd_after_prepare(stand_in_graphs, where):
    """``prepare`` ran fxslots' backward, so a replayed forward could hand autograd one token
    per arena, which compiled autograd's copy of the backward graph cannot read. A forward
    under compiled autograd hands views (its saved tensors are watched), and a forward outside
    it hands views until the loop ran a backward through fxslots: gradients stay exact."""
    _train_under_compiled_autograd(where, 1, prepared=True)


def _train_under_compiled_autograd(where: str, slots: int, prepared: bool) -> None:
    ours, ref, f, _ = compiled_twins(MLP, {"slots": slots})
    if prepared:
        fxslots.prepare(f, [torch.randn(4, 16)])

    def bitwise(a, b, step):
        assert torch.equal(a, b), step
    train_under_compiled_autograd(f, ours, ref, [torch.randn(4, 16) for _ in range(4)], where,
                                  bitwise)


def test_a_backward_that_cannot_replay_after_a_token_forward_rebuilds_the_views(
        stand_in_graphs):
    """A forward replayed with tokens, then a parameter given new memory before its backward:
    the backward cannot replay (the graph reads the old address) and runs, then captures,
    on the views the tokens stand for."""
    def move(step, models):
        if step == 3:
            for m in models:
                with torch.no_grad():
                    m.layers[0].weight.data = m.layers[0].weight.data * 2

    captures = []
    recipes = _train_pair({}, 6, between=lambda i, ms: (
        captures.append(fxslots.counters["captures"]), move(i, ms)))
    assert recipes[3], "step 3's forward handed out no tokens: nothing tested"
    assert captures[4] > captures[3], "the backward after the move was not captured again"


def test_an_uncapturable_backward_runs_both_directions_uncaptured(stand_in_graphs, monkeypatch):
    """A backward that cannot be a CUDA graph (capturable.py: a host tensor in it) turns its
    variant's executor eager before anything runs: no capture in either direction, one
    warning, gradients aot_eager's."""
    monkeypatch.setattr(backend, "uncapturable_reason", lambda saved, gm, device, static=(): (
        None if saved is not None else "node n (test) holds a cpu tensor"))
    with pytest.warns(UserWarning, match="without CUDA graphs .*its backward: node n"):
        _train_pair({}, 4)
    assert fxslots.counters["captures"] == 0 and fxslots.counters["uncaptured_graphs"] == 1


def test_debug_refuses_a_replay_into_a_slot_nobody_holds():
    """Debug mode checks, before each replay, that a live microbatch holds the slot the graph
    writes. Only a bug in fxslots can reach that state, so it is driven directly here."""
    from fxslots.runtime.ring import SlotRing
    from fxslots.options import Options

    ring = SlotRing("r", Options(slots=1, debug=True))
    slot, alias, _ = ring.acquire(64, torch.device("cpu"), "v0")
    slot.check_held()  # held: replays go ahead
    ring.release(slot)
    with pytest.raises(fxslots.CaptureError, match="slot 0, which no live microbatch holds"):
        slot.check_held()
    del alias


@pytest.mark.parametrize("rows", ["dense", "every-other"])
def test_staged_inputs_count_as_copies(stand_in_graphs, rows):  # noqa: F811
    """Under CUDA graphs a non-static input is copied into the slot before each replay: the
    plan counts the bytes the copy moves (issue 10; a review found every other row counted
    with the gaps between) and explain() says so beside the saved values' copies."""
    torch.manual_seed(0)
    x = torch.randn(4, 16) if rows == "dense" else torch.randn(8, 16)[::2]
    report = fxslots.explain(MLP(16, 32, 2), x)
    ((_, plan),) = report.plans
    assert plan.staging and int(plan.staged_bytes) == x.numel() * x.element_size()
    assert f"(and {x.numel() * x.element_size()} of inputs staged" in str(report)


class _Masked(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x, mask):
        return torch.tanh(self.lin(x)).masked_fill(mask, 0.0)


def test_an_expanded_input_is_staged_one_slice(stand_in_graphs):
    """A broadcast mask passed in expanded (stride 0, as transformers' attention masks arrive):
    its staging view keeps the strides, so one slice is copied into it (copy_ refuses a
    destination whose elements overlap: found on the H200 with Mixtral), at the first runs and
    at every replay, with the mask's values changing between calls."""
    torch.manual_seed(0)
    model = _Masked()
    xs = [torch.randn(4, 8) for _ in range(4)]
    masks = [(torch.rand(1, 8) > 0.5).expand(4, 8) for _ in range(4)]

    def train(backend, **kw):
        fxslots.reset()
        m = copy.deepcopy(model)
        f = torch.compile(m, backend=backend, dynamic=False, **kw)
        outs = [f(x, mask) for x, mask in zip(xs, masks, strict=True)]
        for o in outs:
            o.square().mean().backward()
        return outs, [p.grad for p in m.parameters()]

    ours = train("fxslots", options={"slots": 4})
    assert fxslots.counters["captures"] > 0 and _StandInGraph.replays > 0
    ref = train("aot_eager")
    for a, b in zip(ours[0] + ours[1], ref[0] + ref[1], strict=True):
        assert torch.equal(a, b)


class SharedOutput(torch.nn.Module):
    """Returns a value its backward saves (as T5 returns its key/value caches)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = torch.cat([self.lin(x), x], dim=-1)
        return h, (h * h).sum()


def test_a_saved_user_output_is_written_in_the_slot_and_copied_out_once(stand_in_graphs):
    """Under CUDA graphs every user output is copied out for the caller, so a value both
    returned and saved is written into its slot by its own op (no copy into the slot), and the
    caller's copy is made from the slot. What the caller keeps must survive that slot's reuse
    by the next microbatch (slots=1; debug poisons released arenas), on the uncaptured first
    run, at the capture and at replays."""
    torch.manual_seed(0)
    ours, ref = SharedOutput(), SharedOutput()
    ref.load_state_dict(ours.state_dict())
    f = torch.compile(ours, backend="fxslots", options={"slots": 1, "debug": True})
    xs = [torch.randn(4, 8) for _ in range(5)]
    with fxslots.report.recording() as records:
        kept = []
        for x in xs:
            h, loss = f(x)
            loss.backward()
            kept.append(h)
    for x, h in zip(xs, kept, strict=True):
        h_ref, loss_ref = ref(x)
        loss_ref.backward()
        assert torch.equal(h.detach(), h_ref.detach())
    for a, b in zip(ours.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)
    assert _StandInGraph.replays > 0
    shared = {g.id for g in records[0].saved.groups if g.user_visible}
    (p,) = [p for p in records[0].plan.placements if p.group in shared]
    assert p.write is Write.OUT and "the caller's copy is made from the slot" in p.reason


def test_saved_tensors_in_the_slot_carry_no_dynamic_marks(stand_in_graphs, monkeypatch):
    """AOTAutograd marks every saved tensor of dynamic shape at every forward (an attribute
    per tensor, dozens a call); those in the slot reach the backward as the arena token or its
    views, for which the mark means nothing, so fxslots drops their marks at compile time
    (``_torch.forget_saved_dynamism``); gradients stay aot_eager's. Without graphs, a saved
    input is the caller's own tensor, and keeps its mark (below)."""
    from fxslots.runtime.variant import Variant

    marks = ("_dynamo_propagated_dynamic_indices", "_dynamo_weak_dynamic_indices")
    seen = {"slot": 0, "marked": 0}
    backward = Variant.backward

    def spy(self, args):
        for a in args:
            if isinstance(a, torch.Tensor) and any(s.contains(a) for s in self.ring.slots):
                seen["slot"] += 1
                seen["marked"] += any(hasattr(a, m) for m in marks)
        return backward(self, args)

    monkeypatch.setattr(Variant, "backward", spy)
    ours, ref, f, g = compiled_twins(lambda: MLP(16, 32, 3), dynamic=True)
    for n in (4, 6, 8, 4, 6, 8):
        x = torch.randn(n, 16)
        f(x).square().sum().backward()
        g(x).square().sum().backward()
    assert seen["slot"] > 0 and seen["marked"] == 0, seen
    assert _StandInGraph.replays > 0
    for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)


def test_without_graphs_a_saved_input_keeps_its_dynamic_mark():
    """Without CUDA graphs (CPU) the caller's input is saved as it is, not in the slot, and
    AOTAutograd marks its dynamic dims as it does under aot_eager: a later compiled function
    it feeds sees it dynamic and compiles no extra graph (found in review)."""
    marks = ("_dynamo_propagated_dynamic_indices", "_dynamo_weak_dynamic_indices")
    seen = {}
    for name in ("aot_eager", "fxslots"):
        torch.manual_seed(0)
        f = torch.compile(MLP(16, 32, 3), backend=name, dynamic=True)
        x = torch.randn(5, 16)
        f(x).sum().backward()
        seen[name] = [getattr(x, m, None) for m in marks]
    assert seen["fxslots"] == seen["aot_eager"] and any(seen["aot_eager"]), seen


class _Expands(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8))

    def forward(self, x):
        return (x.sin() * self.w).sum(0, keepdim=True).expand(4, 8)


def _skip_where_aot_eager_fails_on_expands():
    """torch 2.11 and 2.12's AOTAutograd restrides the gradient of an expanded output into an
    expanded tensor, which its copy refuses: plain aot_eager fails, and fxslots with it."""
    out = torch.compile(_Expands(), backend="aot_eager")(torch.randn(3, 8))
    try:
        out.sum().backward()
    except RuntimeError as e:
        pytest.skip(f"torch {torch.__version__}'s aot_eager fails here too: {e}")


class _ExpandsSaved(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 8))

    def forward(self, x):
        return torch.tanh(x @ self.w)[:1].expand(4, 8)  # a view of what tanh saves


@pytest.mark.parametrize("model", [_Expands, _ExpandsSaved], ids=["pool", "saved"])
def test_an_expanded_output_is_copied_out_dense(stand_in_graphs, model):
    """A forward whose output is expanded (elements sharing memory) hands the caller a dense
    copy of it: a copy cannot write an overlapping destination (found in review: it raised at
    every replay; and, where the output views a saved tensor in the slot, at the first run,
    uncaptured, too). Values and gradients are aot_eager's."""
    _skip_where_aot_eager_fails_on_expands()
    ours, ref, f, g = compiled_twins(model)
    for _ in range(4):
        x = torch.randn(3, 8)
        a, b = f(x), g(x)
        assert torch.equal(a, b)
        (a * torch.arange(32.0).view(4, 8)).sum().backward()
        (b * torch.arange(32.0).view(4, 8)).sum().backward()
    assert _StandInGraph.replays > 0
    assert torch.equal(ours.w.grad, ref.w.grad)


@pytest.mark.parametrize("options,dynamic", [({}, False), ({"offload": "all"}, False),
                                             ({}, True)], ids=["slot", "offload-all", "dynamic"])
def test_replayed_forwards_hand_aotautograd_one_saved_tensor_per_arena(stand_in_graphs, options,
                                                                       dynamic):
    """A replayed forward leaves out all but one of the saved tensors in each arena (they are
    one token): AOTAutograd saves the token and the parameters, not dozens of tensors, and the
    backward puts the token back at every saved place (``runtime.collapse``). First runs hand
    over every view. Host arena (offload) and dynamic shapes (saved symints) included;
    gradients bitwise aot_eager's, with retain_graph's second backward too."""
    ours, ref, f, g = compiled_twins(lambda: MLP(16, 32, 4), {"slots": 1, **options}, dynamic)
    with torch._functorch.config.patch(donated_buffer=False):  # aot_eager's retain_graph
        saved = _collapse_steps(f, g, ours, ref, dynamic)
    # a first run hands over every view; a replay one token per arena, the weights as they are
    weights, arenas = 3, 2 if options else 1  # the first layer's is not needed; offload: 2
    assert saved[0][0] == saved[0][1] > weights + arenas and saved[-1][1] == saved[0][1], saved
    assert saved[-1][0] == weights + arenas, saved


def _collapse_steps(f, g, ours, ref, dynamic):
    saved = []
    for step in range(6):
        x = torch.randn(4 + 2 * (step % 2 and dynamic), 16)
        a, b = f(x), g(x)
        saved.append((len(a.grad_fn.saved_tensors), len(b.grad_fn.saved_tensors)))
        for y in (a, b):
            y.square().sum().backward(retain_graph=step == 5)
            if step == 5:
                y.sum().backward()
        for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
            assert torch.equal(p.grad, q.grad), step
    return saved


class _AliasedInputs(torch.nn.Module):
    """Mutates ``y``, which views the storage of ``x`` (``f(t, t[1:3])``): AOTAutograd hands
    the graph one synthetic base and rebuilds both with ``as_strided`` at offsets counted from
    the start of ``t``'s storage. ``saved_view``: the linear saves ``x`` itself (a view of the
    mutated base), else a fresh copy of it."""

    def __init__(self, saved_view: bool):
        super().__init__()
        self.l, self.saved_view = torch.nn.Linear(8, 8), saved_view

    def forward(self, x, y):
        y.mul_(2.0)
        return torch.tanh(self.l(x if self.saved_view else x * 1.0)) * y.sum()


@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "eager"])
@pytest.mark.parametrize("saved_view", [True, False], ids=["saved-view", "saved-copy"])
def test_reads_at_absolute_storage_offsets_never_land_in_a_slot(request, graphs, saved_view):
    """Found by review (session 45): a slot moves the bytes it holds, and ``as_strided`` counts
    its offset from the start of its input's storage, so under CUDA graphs the staged base was
    read (and written back) at other bytes of the arena: garbage outputs, the caller's tensor
    overwritten, NaN gradients. Now a saved group read that way falls back (no slots), and an
    input read that way is not staged (no CUDA graphs, slots kept); each with a warning naming
    the node. Outputs, the mutated caller's tensor and gradients are bitwise eager's."""
    if graphs:
        request.getfixturevalue("stand_in_graphs")
    ours, ref, f, _ = compiled_twins(lambda: _AliasedInputs(saved_view), {"slots": 1})
    expected = ("without slots.*as_strided.*absolute storage offsets" if saved_view else
                "without CUDA graphs.*as_strided.*absolute storage offsets")
    for step in range(3):
        t = torch.randn(4, 8, generator=torch.Generator().manual_seed(step))
        u = t.clone()
        with (pytest.warns(UserWarning, match=expected) if step == 0 and (graphs or saved_view)
              else contextlib.nullcontext()):
            out = f(t, t[1:3])
        want = ref(u, u[1:3])
        assert torch.equal(out, want) and torch.equal(t, u), step
        out.square().sum().backward()
        want.square().sum().backward()
        for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
            assert torch.equal(p.grad, q.grad), step
    assert fxslots.counters["fallbacks"] == int(saved_view)
    assert fxslots.counters["uncaptured_graphs"] == int(graphs and not saved_view)
    assert saved_view or any(r.ring.slots for r in fxslots.regions())  # the slots stay


@pytest.mark.parametrize("debug", [False, True], ids=["", "debug"])
@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "eager"])
def test_saved_views_a_hook_keeps_are_never_written_again(request, caplog, graphs, debug):
    """Found by review (session 45): a pack hook that keeps what it packs (activation
    statistics, debugging) held views of the slot after their backward released it, and the
    next forward wrote over them. Such a slot now leaves its arenas to those views (one
    warning) and takes new ones: every kept tensor keeps its value, as eager's do, and the
    gradients stay bitwise eager's. Debug mode does not poison such a slot at release."""
    if graphs:
        request.getfixturevalue("stand_in_graphs")
    ours, ref, f, _ = compiled_twins(MLP, {"slots": 1, "debug": debug})
    kept: list[tuple[torch.Tensor, torch.Tensor]] = []  # (what the hook got, its value then)

    def pack(t):
        kept.append((t, t.detach().clone()))
        return t
    for step in range(4):
        x = torch.randn(4, 16, generator=torch.Generator().manual_seed(step))
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = f(x).square().sum()
        loss.backward()
        ref(x).square().sum().backward()
        assert kept and all(torch.equal(t, then) for t, then in kept), step
        for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
            assert torch.equal(p.grad, q.grad), step
    assert sum(r.ring.orphans for r in fxslots.regions()) >= 3
    assert len([r for r in caplog.records if "a saved-tensor hook kept them" in r.getMessage()
                and r.levelname == "WARNING"]) == 1


def _through(blocks, x):
    """``x`` through each block in turn: blocks compiled one by one, torchtitan's way."""
    for block in blocks:
        x = block(x)
    return x


@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "eager"])
def test_blocks_compiled_one_by_one_take_slots_each(request, graphs):
    """Found by review (session 45): torchtitan compiles each transformer block on its own;
    Dynamo compiles the block's code once and every block runs that graph, so with
    ``slots=1`` (one microbatch) the second block's forward found the one slot pending and
    raised ``SlotsExhaustedError``. ``slots`` now counts per parameter set: three blocks, one
    and then two microbatches in flight (``slots=2``), gradients bitwise eager's, and a third
    microbatch still refused."""
    if graphs:
        request.getfixturevalue("stand_in_graphs")
    torch.manual_seed(0)
    ours = torch.nn.ModuleList(MLP(16, 32, 2) for _ in range(3))
    ref = copy.deepcopy(ours)
    blocks = [torch.compile(b, backend="fxslots", options={"slots": 2}) for b in ours]

    def run_blocks(fns, x):
        return _through(fns, x).square().sum()
    for step in range(3):
        xs = [torch.randn(4, 16, generator=torch.Generator().manual_seed(10 * step + i))
              for i in range(1 + step % 2)]
        losses = [run_blocks(blocks, x) for x in xs]
        for loss in losses:
            loss.backward()
        for x in xs:
            run_blocks(ref, x).backward()
        for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
            assert torch.equal(p.grad, q.grad), step
    rings = {id(r.ring): r.ring for r in fxslots.regions()}.values()
    assert sum(len(ring.slots) for ring in rings) == 6  # two per block
    pending = [run_blocks(blocks, torch.randn(4, 16)) for _ in range(2)]
    with pytest.raises(fxslots.SlotsExhaustedError):
        run_blocks(blocks, torch.randn(4, 16))
    del pending


class _SharedNormBlock(torch.nn.Module):
    """A block with a LayerNorm every block shares, read first or last."""

    def __init__(self, norm: torch.nn.Module, first: bool):
        super().__init__()
        self.fc, self.norm, self.first = torch.nn.Linear(16, 16), norm, first

    def forward(self, x):
        if self.first:
            return x + torch.tanh(self.fc(self.norm(x)))
        return x + self.norm(torch.tanh(self.fc(x)))


@pytest.mark.parametrize("first", [True, False], ids=["norm-first", "norm-last"])
@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "eager"])
def test_blocks_that_share_a_parameter_keep_their_slots_and_exact_gradients(request, graphs,
                                                                            first):
    """Found by review (session 46): blocks compiled one by one that share a LayerNorm. A
    parameter set was known by its first parameter alone: with the norm read first, the ring
    took all four blocks for one module and raised ``SlotsExhaustedError`` at the third
    block's forward with ``slots=2``. Sets are now known by their first and last parameter,
    and a region whose sets share a parameter leaves adding into .grad to autograd (the
    rounding this avoids: ``test_parameter_sets_that_share_a_parameter_leave_accumulation_to_
    autograd``): bitwise eager's with ``.grad`` buffers kept, the norm read first or last."""
    if graphs:
        request.getfixturevalue("stand_in_graphs")
    torch.manual_seed(0)
    norm = torch.nn.LayerNorm(16)
    ours = torch.nn.ModuleList(_SharedNormBlock(norm, first) for _ in range(4))
    ref = copy.deepcopy(ours)
    for p in (*ours.parameters(), *ref.parameters()):
        p.grad = torch.zeros_like(p)  # kept: each backward adds into them
    blocks = [torch.compile(b, backend="fxslots", options={"slots": 2}) for b in ours]

    def run_blocks(fns, x):
        return _through(fns, x).square().mean()
    for step in range(3):
        for mb in range(2):
            x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(10 * step + mb))
            run_blocks(blocks, x).backward()
            run_blocks(ref, x).backward()
        for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
            assert torch.equal(p.grad, q.grad), step
    assert any(r.sets_share for r in fxslots.regions())


class _StridedRead(torch.nn.Module):
    """``as_strided`` on a saved activation that sits past the first group of the slot: with
    an explicit offset (counted from the start of ``h``'s storage) or without one (``h``'s own
    offset: a read relative to ``h``, fine in a slot)."""

    def __init__(self, offset: bool):
        super().__init__()
        self.a0, self.a, self.b = (torch.nn.Linear(16, 16), torch.nn.Linear(16, 32),
                                   torch.nn.Linear(16, 8))
        self.offset = offset

    def forward(self, x):
        h = torch.tanh(self.a(torch.sin(self.a0(x))))
        c = (h.view(-1)[32:].as_strided((3, 2, 16), (32, 16, 1), 32) if self.offset
             else h.as_strided((4, 2, 16), (32, 16, 1)))
        return (self.b(c) * h.sum()).sum(-1)


@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "eager"])
@pytest.mark.parametrize("offset", [True, False], ids=["offset", "no-offset"])
def test_as_strided_at_an_offset_of_a_saved_activation(request, graphs, offset):
    """A review found the explicit offset read other bytes of the arena before session 45
    (silently wrong gradients); the graph now runs without slots, with the node named. With
    no offset given the read is relative and the slots stay. Bitwise eager's either way."""
    if graphs:
        request.getfixturevalue("stand_in_graphs")
    ours, ref, f, _ = compiled_twins(lambda: _StridedRead(offset), {"slots": 1})
    for step in range(3):
        x = torch.randn(4, 16, generator=torch.Generator().manual_seed(step))
        with (pytest.warns(UserWarning, match="without slots.*node as_strided.*absolute")
              if offset and step == 0 else contextlib.nullcontext()):
            out = f(x)
        want = ref(x)
        assert torch.equal(out, want), step
        out.square().sum().backward()
        want.square().sum().backward()
        for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
            assert torch.equal(p.grad, q.grad), step
    assert fxslots.counters["fallbacks"] == int(offset)
    assert fxslots.counters["uncaptured_graphs"] == 0


class _ScaleAndShare(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w, w.detach()  # the second output is the parameter's bytes

    @staticmethod
    def backward(ctx, g, gw):
        x, w = ctx.saved_tensors
        return g * w, (g * x).sum(0) + gw


class _SharesItsWeight(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.w = torch.nn.Parameter(torch.randn(8))

    def forward(self, x):
        return _ScaleAndShare.apply(torch.tanh(self.a(x)), self.w)


def test_an_output_viewing_a_parameter_is_a_new_tensor_at_each_replay(stand_in_graphs):
    """Found by a review: a replay handed back the captured object for an output over a
    parameter's bytes. Autograd sets a differentiable output's grad_fn on the object itself,
    so an earlier microbatch's output took the later one's node (its backward read the later
    microbatch's saved tensors: a wrong gradient), and the object kept the last forward's
    graph and slot alive (slots=1 ran out after a forward dropped without its backward)."""
    ours, ref, f, g = compiled_twins(_SharesItsWeight, {"slots": 2})
    for step in range(4):
        xs = [torch.randn(4, 8) for _ in range(2)]
        outs = [f(x) for x in xs]
        assert outs[0][1] is not outs[1][1]
        for y, w in outs:
            (y.sum() + (w * w).sum()).backward()
        for x in xs:
            y, w = g(x)
            (y.sum() + (w * w).sum()).backward()
        for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
            assert torch.equal(p.grad, q.grad), step
    assert _StandInGraph.replays > 0
    fxslots.reset()
    f, before = torch.compile(_SharesItsWeight(), backend="fxslots", options={"slots": 1}), None
    for step in range(6):
        y, w = f(torch.randn(4, 8))
        assert before is None or before() is not w
        if step != 3:  # a forward dropped without its backward gives its slot back
            y.sum().backward()
        before = weakref.ref(w)
        del y, w


class _NormFirst(nn.Module):
    """Its first and last parameters (the anchors) are ones the forward saves."""

    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(16)
        self.lin = nn.Linear(16, 16, bias=False)

    def forward(self, x):
        return torch.tanh(self.lin(self.ln(x)))


def test_deleting_a_model_frees_its_arenas_graphs_and_weights(stand_in_graphs):
    """Found by a review (session 50): a captured forward held the parameters it saves (the
    LayerNorm's weight, a tied head's view of the embedding) as its constant outputs, so a
    deleted model's anchor never died: its weights, arenas and graphs stayed for good (12 of a
    GPT's 20 parameters). Constant outputs now hold their parameter weakly (``ParamView``)."""
    import weakref
    model = _NormFirst()
    c = torch.compile(model, backend="fxslots", options={"slots": 2})
    for _ in range(4):  # warm-up, capture, replays
        c(torch.randn(4, 16)).sum().backward()
    assert fxslots.counters["captures"] > 0
    arenas = [weakref.ref(s.arena) for r in fxslots.regions() for s in r.ring.slots
              if s.arena is not None]
    params = [weakref.ref(p) for p in model.parameters()]
    assert arenas and params
    del model, c
    gc.collect()
    assert [p() for p in params] == [None] * len(params), "captured graphs keep the weights"
    assert [a() for a in arenas] == [None] * len(arenas), "the arenas outlive the model"


def _graphs_and_sets() -> tuple[int, int]:
    regions = fxslots.regions()
    graphs = sum(len(v.executor.graphs) for r in regions for v in r.live_variants())
    sets = sum(len(r.param_sets) + len(r.related) + len(r.outputs) + len(r.placed_outputs)
               + len(r._recaptures) for r in regions)
    return graphs, sets


def test_a_dead_models_graphs_go_while_a_sibling_lives(stand_in_graphs):
    """Found by a review (session 50): models of one class share compiled code, and each
    parameter set gets graphs of its own; a short-lived model's stayed while a sibling kept the
    region alive (203 graphs after 40 models: a sweep, an evaluation copy per epoch)."""
    keeper = _NormFirst()
    ck = torch.compile(keeper, backend="fxslots", options={"slots": 2})
    for _ in range(4):
        ck(torch.randn(4, 16)).sum().backward()
    before = _graphs_and_sets()
    for _ in range(3):
        model = _NormFirst()
        c = torch.compile(model, backend="fxslots", options={"slots": 2})
        for step in range(4):
            if step == 2:  # a reload: captured again (a key in Region._recaptures)
                model.lin.weight.data = model.lin.weight.data.clone()
            c(torch.randn(4, 16)).sum().backward()
        assert _graphs_and_sets()[0] > before[0]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # an exception in a finalizer is only printed
            del model, c
            gc.collect()
        assert _graphs_and_sets() == before, "a dead model's graphs or parameter sets stay"
    ck(torch.randn(4, 16)).sum().backward()  # the sibling still replays what it captured
    assert _graphs_and_sets() == before


def test_many_distinct_shapes_warn_once(stand_in_graphs, monkeypatch, caplog):
    """Each distinct input shape gets graphs of its own, kept for good: a stream of sizes
    (unpadded sequence lengths) piles them up. The ``SHAPES_NOTED``-th distinct shape a
    variant captures warns once (torch's CUDA graph trees warn at 50 too); the gradients stay
    exact."""
    from fxslots.runtime.cudagraphs import banks
    monkeypatch.setattr(banks, "SHAPES_NOTED", 3)
    twins = compiled_twins(lambda: MLP(16, 32, 3), dynamic=True)
    with caplog.at_level("WARNING", logger="fxslots"):
        train_twins(twins, [torch.randn(rows, 16) for rows in (2, 3, 4, 5, 6, 3, 4)
                            for _ in range(2)])  # each size's first step warms up
    noted = [r.getMessage() for r in caplog.records if "distinct input shapes" in r.getMessage()]
    assert len(noted) == 1 and "for 3 distinct input shapes" in noted[0], noted


@pytest.mark.parametrize("warm", [0, 2], ids=["cold", "warm"])
def test_a_backward_under_vmap_runs_uncaptured(stand_in_graphs, warm):
    """Found by a review (session 51): ``autograd.grad(..., is_grads_batched=True)`` (what
    ``jacobian(vectorize=True)`` runs) hands the backward batched tangents, which staging for
    a graph copied into plain memory: vmap's RuntimeError. Such a backward runs uncaptured;
    bitwise aot_eager's, and training after it too."""
    ours, ref, f, g = compiled_twins(lambda: MLP(8, 16, 3))
    gen = torch.Generator().manual_seed(1)
    xs = [torch.randn(2, 8, generator=gen) for _ in range(warm + 2)]
    if warm:
        train_twins((ours, ref, f, g), xs[:warm])
    x = xs[warm].requires_grad_(True)
    tangents = torch.eye(16).view(16, 2, 8)
    (a,), (b,) = (torch.autograd.grad(h(x), x, tangents, is_grads_batched=True) for h in (f, g))
    assert torch.equal(a, b)
    assert torch.equal(torch.autograd.functional.jacobian(f, x, vectorize=True),
                       torch.autograd.functional.jacobian(g, x, vectorize=True))
    train_twins((ours, ref, f, g), xs[warm + 1:] * 3)


class _TwoOutputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 16)

    def forward(self, x):
        y = self.a(x)
        return y, torch.tanh(y) * 2


def test_a_forwards_outputs_are_the_callers_own(stand_in_graphs):
    """Found by a review (session 51): a replayed forward copied its outputs out of the pool
    into one buffer and handed out views of it. Autograd then refused an in-place change to
    one (``y.add_(1)``: "a function that returns multiple views"), a ``no_grad`` change to one
    bumped the other's version (its backward raised), and a logged loss kept every output's
    bytes. Each output now gets memory of its own; all bitwise aot_eager's."""
    ours, ref, f, g = compiled_twins(_TwoOutputs)
    gen = torch.Generator().manual_seed(1)
    for _ in range(4):  # warm-up, capture, replays
        x = torch.randn(4, 16, generator=gen)
        (ya, sa), (yb, sb) = f(x), g(x)
        assert ya.untyped_storage().data_ptr() != sa.untyped_storage().data_ptr()
        for y in (ya, yb):
            y.add_(1)
        with torch.no_grad():
            sa.mul_(0.5), sb.mul_(0.5)
        assert torch.equal(ya, yb) and torch.equal(sa, sb)
        (ya.square() + sa).sum().backward()
        (yb.square() + sb).sum().backward()
    assert _StandInGraph.replays > 0
    for a, b in zip(ours.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)
