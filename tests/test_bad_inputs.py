"""The bad-input matrix (issue 4, part 2): one test per input, written up in docs/reliability.md.

Each input either works like eager (gradients bitwise equal to aot_eager's, close to eager's) or
raises a clear error before any arena byte is written; none corrupts a gradient. Mixed devices
need a GPU: see tests/test_cuda_reliability.py::test_mixed_devices_*.
"""

from __future__ import annotations

import gc
import time
import warnings

import pytest
import torch
from torch import nn

import fxslots
from fxslots import ArenaLimitError, OptionsError, SlotsExhaustedError, UnsupportedGraphError
from fxslots import backend as fxb
from tests.helpers import Net


def rings():
    return [g.ring for g in fxslots.regions()]


def pending() -> int:
    return sum(r.pending() for r in rings())


def arenas() -> list[tuple[int, int, torch.Tensor]]:
    """(data_ptr, bytes, a copy of the bytes) of every slot's arena."""
    return [(s.arena.data_ptr(), s.nbytes, s.arena.clone())
            for r in rings() for s in r.slots if s.arena is not None]


def assert_arenas_unchanged(before, after) -> None:
    assert [(p, n) for p, n, _ in before] == [(p, n) for p, n, _ in after]
    for (_, _, a), (_, _, b) in zip(before, after, strict=True):
        assert torch.equal(a, b), "an arena byte was written"


def compiled(model, **options):
    return torch.compile(model, backend="fxslots", options=options)


def grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_same_grads(got: nn.Module, want: nn.Module, exact: bool = False) -> None:
    g, w = grads(got), grads(want)
    assert g.keys() == w.keys()
    for k in w:
        if exact:
            assert torch.equal(g[k], w[k]), k
        else:
            torch.testing.assert_close(g[k], w[k], rtol=1e-5, atol=1e-6, msg=k)


def batch(n: int = 4, d: int = 8, seed: int = 1) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed))


def run_fb(fn, xs, order) -> list[torch.Tensor]:
    """Forwards of every x, then backwards in ``order``; returns detached outputs."""
    outs = [fn(x) for x in xs]
    for i in order:
        outs[i].sum().backward()
    return [o.detach() for o in outs]


def root_cause(e: BaseException) -> BaseException | None:
    """The OptionsError behind Dynamo's BackendCompilerFailed (inner_exception, __cause__ or
    __context__, depending on the torch version)."""
    for c in (getattr(e, "inner_exception", None), e.__cause__, e.__context__):
        if isinstance(c, fxslots.FxslotsError):
            return c
    return None


# ----------------------------------------------------------------------------- the matrix


def test_too_many_forwards_in_flight():
    eager, model = Net(), Net()
    c = compiled(model, slots=2, debug=True)
    xs = [batch(seed=i) for i in range(3)]
    o0, o1 = c(xs[0]), c(xs[1])
    before = arenas()
    with pytest.raises(SlotsExhaustedError) as ei:
        c(xs[2])
    msg = str(ei.value)
    assert "'slots'" in msg and "all 2 are pending" in msg and "(now 2)" in msg, msg
    assert "torch.no_grad()" in msg, msg  # the common cause: an evaluation step with grad on
    assert_arenas_unchanged(before, arenas())
    assert pending() == 2
    o1.sum().backward()
    o0.sum().backward()
    # The refused microbatch can run once a slot is free; gradients equal eager's.
    c(xs[2]).sum().backward()
    run_fb(eager, xs[:2], [1, 0])
    eager(xs[2]).sum().backward()
    assert_same_grads(model, eager)
    assert pending() == 0


def test_too_many_forwards_in_flight_per_block_names_the_modules():
    """Blocks compiled one by one share one compiled graph, and each block gets ``slots`` of
    its own: the error counted every block's forward as a microbatch ("microbatch 0,
    microbatch 1" where both were the first microbatch, in two blocks; found by a review).
    It now says how many modules hold the slots and how many forwards this one has."""
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(2)]
    options = {"slots": 1}  # one object: one region (as a loop compiling each block gives)
    run = [torch.compile(b, backend="fxslots", options=options) for b in blocks]
    x = torch.randn(4, 8)
    kept = run[1](run[0](x))  # microbatch 0 through both blocks: one slot each
    with pytest.raises(SlotsExhaustedError) as ei:
        run[0](x)  # microbatch 1 at the first block
    msg = str(ei.value)
    assert "forwards of 2 modules that share this compiled graph" in msg, msg
    assert "this module has 1 in flight" in msg and "(now 1)" in msg, msg
    kept.sum().backward()
    run[1](run[0](x)).sum().backward()  # a slot is free again


def test_backward_called_twice():
    eager, model = Net(), Net()
    c = compiled(model, slots=1, debug=True)
    x = batch()
    out = c(x)
    out.sum().backward()
    first = grads(model)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        out.sum().backward()
    assert all(torch.equal(first[k], v) for k, v in grads(model).items())
    assert pending() == 0
    c(batch(seed=2)).sum().backward()  # the slot is free again
    eager(x).sum().backward()
    eager(batch(seed=2)).sum().backward()
    assert_same_grads(model, eager)


def test_retain_graph(caplog):
    """A backward with retain_graph=True keeps its slot while the graph lives (it may run
    backward again). A forward that finds every slot pending with one of them so retained
    takes a new slot, with a warning naming the cause, as eager would hold that memory: it
    used to raise SlotsExhaustedError (a review's finding: a loop passing retain_graph=True out
    of habit, rebinding ``loss`` after the next forward, ran under aot_eager only)."""
    eager, model = Net(), Net()
    c = compiled(model, slots=1, debug=True)
    x = batch()
    out = c(x)
    out.sum().backward(retain_graph=True)
    assert pending() == 1, "retain_graph=True keeps the saved tensors, so it keeps the slot"
    before = arenas()
    with caplog.at_level("WARNING", logger="fxslots"):
        other = c(batch(seed=2))  # the retained microbatch still owns the first slot
    assert "retain_graph=True" in caplog.text and "grows to 2 slots" in caplog.text
    assert_arenas_unchanged(before, arenas()[:1])
    out.sum().backward()  # second backward through the retained graph
    other.sum().backward()
    assert pending() == 0
    e = eager(x)
    e.sum().backward(retain_graph=True)
    e.sum().backward()
    eager(batch(seed=2)).sum().backward()
    assert_same_grads(model, eager, exact=True)


def test_a_loop_passing_retain_graph_by_habit_trains_in_two_slots():
    """``loss`` rebound after the next forward: each step's forward finds the last step's
    retained graph still alive. The ring grows once (to 2 slots), never again; gradients
    bitwise aot_eager's."""
    torch.manual_seed(0)
    model, ref = Net(), Net()
    ref.load_state_dict(model.state_dict())
    c = compiled(model, slots=1)
    g = torch.compile(ref, backend="aot_eager")
    losses = {}
    for step in range(5):
        for f, m in ((c, model), (g, ref)):
            losses[f] = f(batch(seed=step)).square().sum()  # the last step's dies only here
            losses[f].backward(retain_graph=True)
            if step < 4:
                m.zero_grad()
        assert sum(len(r.slots) for r in rings()) == (1 if step == 0 else 2)
    assert_same_grads(model, ref, exact=True)


def test_create_graph_double_backward():
    """First-order gradients with create_graph=True are right; a double backward raises the
    same clear error aot_eager raises; once the graph is gone the slot is free again.

    AOTAutograd's create_graph path builds a reference cycle around the saved tensors (its
    per-call ``CompiledFunctionBackward`` class in ``_double_backward``), so they die at the
    next garbage collection, not when the user drops the graph. The collector is off here, as
    it may be at any moment of a real step: the slot must still be usable."""
    gc.collect()
    gc.disable()
    try:
        _create_graph_double_backward()
    finally:
        gc.enable()


@pytest.mark.parametrize("strict", [False, True])
def test_a_gradient_penalty_restricted_to_parameters_is_not_silent(strict):
    """Found by a review (session 51): WGAN-GP's penalty (the norm of an input gradient taken
    with create_graph=True) backpropagated to the parameters alone (``backward(inputs=...)``)
    left the penalty's part out without a word (up to 5.3 off eager): AOTAutograd links a
    double backward only to inputs saved as they are, and fxslots saves a weight's transpose
    (aot_eager saves the weight and raises). The create_graph backward now warns, once, and
    raises with strict=True."""
    model = Net()
    c = torch.compile(model, backend="fxslots", options={"slots": 3, "strict": strict})
    for step in range(2):
        x = batch(seed=step).requires_grad_()
        if strict:
            with pytest.raises(UnsupportedGraphError, match="create_graph=True"):
                torch.autograd.grad(c(x).sum(), x, create_graph=True)
            continue
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            g, = torch.autograd.grad(c(x).sum(), x, create_graph=True)
        ours = [str(w.message) for w in seen if "create_graph=True" in str(w.message)]
        assert len(ours) == (1 if step == 0 else 0), ours  # once per variant
        assert "cannot be differentiated again" in (ours or [""])[0] or step
        (g.norm() + c(x).sum()).backward(inputs=list(model.parameters()))
        del g
    del x
    gc.collect()
    assert pending() == 0


def _create_graph_double_backward():
    eager, model, ref = Net(), Net(), Net()
    c = compiled(model, slots=1, debug=True)
    c_ref = torch.compile(ref, backend="aot_eager")
    x = batch()
    results = {}
    # fxslots last, so that no compile (Dynamo collects garbage after each compile) runs
    # between its create_graph backward and its next forward. Each model's first backward is
    # the create_graph one (a backward compiled earlier with donated buffers refuses
    # create_graph=True, in aot_eager alike: see test_create_graph_after_a_plain_backward).
    for name, fn in (("aot_eager", c_ref), ("eager", eager), ("fxslots", c)):
        xi = x.clone().requires_grad_()
        gx, = torch.autograd.grad(fn(xi).sum(), xi, create_graph=True)
        results[name] = gx.detach().clone()
        try:
            gx.sum().backward()
            results[name + " double"] = "ok"
        except RuntimeError as e:
            results[name + " double"] = str(e)
        del gx, xi
    assert torch.equal(results["fxslots"], results["aot_eager"])
    torch.testing.assert_close(results["fxslots"], results["eager"], rtol=1e-5, atol=1e-6)
    assert results["fxslots double"] == results["aot_eager double"]
    # Every output and gradient of that microbatch is gone: the next forward gets the slot.
    c(batch(seed=3).requires_grad_()).sum().backward()
    assert pending() == 0


def test_create_graph_after_a_plain_backward():
    """Once a backward ran without create_graph, aot_eager refuses create_graph=True (its saved
    tensors are donated to the backward). fxslots donates none (they live in slots; zero-bubble
    pipelines need retain_graph=True), so it runs, and the slot is free again once the
    microbatch is dropped."""
    model, ref = Net(), Net()
    c = compiled(model, slots=1, debug=True)
    c_ref = torch.compile(ref, backend="aot_eager")
    errors = {}
    for name, fn in (("aot_eager", c_ref), ("fxslots", c)):
        fn(batch(seed=1).requires_grad_()).sum().backward()
        x = batch(seed=2).requires_grad_()
        try:
            gx = torch.autograd.grad(fn(x).sum(), x, create_graph=True)[0].detach()
            errors[name] = None
        except RuntimeError as e:
            errors[name] = str(e)
        del x
    assert "donated buffers" in errors["aot_eager"] and errors["fxslots"] is None
    x = batch(seed=2).requires_grad_()
    torch.testing.assert_close(gx, torch.autograd.grad(ref(x).sum(), x)[0])
    assert_same_grads(model, ref, exact=True)
    c(batch(seed=3).requires_grad_()).sum().backward()
    assert pending() == 0


def test_backward_of_output_whose_slot_was_reused():
    """Microbatch 0's backward ran, so its slot went to microbatch 1. Microbatch 0's output
    keeps its value (user outputs never live in a released slot), a second backward through it
    raises autograd's clear error, and microbatch 1's gradients are intact."""
    eager, model = Net(), Net()
    c = compiled(model, slots=1, debug=True)  # debug: released arenas are poisoned with NaN
    x0, x1 = batch(seed=0), batch(seed=1)
    out0 = c(x0)
    value0 = out0.detach().clone()
    out0.sum().backward()
    out1 = c(x1)  # reuses (and overwrites) the only slot
    assert torch.equal(out0.detach(), value0)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        out0.sum().backward()
    out1.sum().backward()
    assert torch.equal(out0.detach(), value0)
    run_fb(eager, [x0], [0])
    run_fb(eager, [x1], [0])
    assert_same_grads(model, eager)


def test_variant_beyond_arena_bound():
    eager, model = Net(), Net()
    small, big = batch(4), batch(64)
    c = compiled(model, slots=2, max_arena_bytes=2048, debug=True)
    c(small).sum().backward()
    before = arenas()
    with pytest.raises(ArenaLimitError) as ei:
        c(big)
    msg = str(ei.value)
    assert "max_arena_bytes=2048" in msg and "arena bytes per slot" in msg, msg
    assert_arenas_unchanged(before, arenas())
    assert pending() == 0
    c(small).sum().backward()  # the old variant still trains
    eager(small).sum().backward()
    eager(small).sum().backward()
    assert_same_grads(model, eager)


def test_variant_beyond_dynamic_bound_recompiles_and_grows():
    """A shape past the range Dynamo was told (mark_dynamic max) is a new variant; the arena of
    the slot it takes grows to it while microbatch 0 is in flight, and gradients stay right."""
    eager, model = Net(), Net()
    c = compiled(model, slots=2)
    xs = [batch(n, seed=n) for n in (4, 6, 40)]
    for x in xs[:2]:  # compiled for batch sizes 2..8; 40 fails that guard: a new variant
        torch._dynamo.mark_dynamic(x, 0, min=2, max=8)
    outs = [c(x) for x in xs[:2]]
    outs[1].sum().backward()
    (ring,) = rings()
    compiles, grown, sizes = fxslots.counters["compiles"], ring.grow_events, _slot_bytes(ring)
    out_big = c(xs[2])  # in flight with microbatch 0
    assert fxslots.counters["compiles"] == compiles + 1, "batch 40 did not recompile"
    (region,) = fxslots.regions()
    assert len(region.live_variants()) == 2, "the new variant did not join the region"
    big = max(lay.nbytes for v in region.live_variants() for lay in v.layouts.values())
    assert big > max(sizes), "the batch-40 variant needs no more bytes than batch 6?"
    assert ring.grow_events > grown and max(_slot_bytes(ring)) == big, (sizes, _slot_bytes(ring))
    assert pending() == 2
    outs[0].sum().backward()
    out_big.sum().backward()
    run_fb(eager, xs[:2], [1])
    o = eager(xs[2])
    eager(xs[0]).sum().backward()
    o.sum().backward()
    assert_same_grads(model, eager)


def _slot_bytes(ring) -> list[int]:
    return [s.nbytes for s in ring.slots]


def test_non_contiguous_inputs():
    eager, model, ref = Net(), Net(), Net()
    c = compiled(model, slots=2, debug=True)
    c_ref = torch.compile(ref, backend="aot_eager")
    xs = [batch(8, 6, seed=0).t(),                                        # transposed
          batch(4, 16, seed=1)[:, ::2],                                    # strided
          batch(1, 8, seed=2).expand(5, 8)]                                # stride 0
    for x in xs:
        assert not x.is_contiguous()
    for fn in (c, c_ref, eager):
        run_fb(fn, xs[:2], [1, 0])
        run_fb(fn, xs[2:], [0])
    assert_same_grads(model, ref, exact=True)
    assert_same_grads(model, eager)


def test_zero_size_tensors():
    eager, model, ref = Net(), Net(), Net()
    c = compiled(model, slots=2, debug=True)
    c_ref = torch.compile(ref, backend="aot_eager")
    xs = [batch(0, 8), batch(3, 8), torch.randn(2, 0, 8), batch(0, 8)]
    for fn in (c, c_ref, eager):
        for x in xs:
            x = x.clone().requires_grad_()
            out = fn(x)
            assert out.shape == x.shape
            out.sum().backward()
            assert x.grad.shape == x.shape
    assert_same_grads(model, ref, exact=True)
    assert_same_grads(model, eager)
    assert pending() == 0


@pytest.mark.parametrize("options, words", [
    ({"slotz": 2}, ["unknown option", "'slotz'", "valid options are ['slots'"]),
    ("slots=2", ["must be a dict", "str 'slots=2'", "valid options are ['slots'"]),
    (5, ["must be a dict", "int 5", "valid options are ['slots'"]),
    ([("slots", 2)], ["must be a dict", "list"]),
    ({"slots": 0}, ["'slots'", ">= 1"]),
    ({"slots": True}, ["'slots'", "int", "bool"]),
    ({"slots": "2"}, ["'slots'", "int", "str"]),
    ({"slots": 10**6}, ["'slots'", "<= 1024", "got 1000000"]),
    ({"slots": 10**9}, ["'slots'", "<= 1024", "got 1000000000"]),
    ({"alignment": 24}, ["'alignment'", "power of two"]),
    ({"alignment": 2**40}, ["'alignment'", "<= 2097152", "got 1099511627776"]),
    ({"max_arena_bytes": -1}, ["'max_arena_bytes'", "positive"]),
    ({"max_arena_bytes": 2**60}, ["'max_arena_bytes'", "<= 281474976710656", "None"]),
    ({"on_capture_failure": "ignore"}, ["'on_capture_failure'", "'raise' or 'eager'"]),
    ({"link_bandwidth": -1e12}, ["'link_bandwidth'", "positive, finite", "got -1000000000000.0"]),
    ({"link_bandwidth": 0}, ["'link_bandwidth'", "positive", "None to measure it", "got 0"]),
    ({"link_bandwidth": float("nan")}, ["'link_bandwidth'", "got nan"]),
], ids=["unknown", "string", "int", "pairs", "zero-slots", "bool-slots", "str-slots",
        "million-slots", "billion-slots", "alignment", "terabyte-alignment", "negative-limit",
        "exabyte-limit", "capture-policy", "negative-link", "zero-link", "nan-link"])
def test_unknown_or_bad_option(options, words):
    """Each bad option is an OptionsError naming the option, the value and what is allowed:
    from ``Options.parse`` at once, and through torch.compile at the first call (Dynamo calls
    backends lazily), where ``except fxslots.OptionsError`` catches it; no ring, arena or
    gradient exists afterwards, and the same model compiled with good options trains."""
    with pytest.raises(OptionsError) as ei:
        fxslots.Options.parse(options)
    for w in words:
        assert w in str(ei.value), (w, str(ei.value))
    model, eager = Net(), Net()
    c = torch.compile(model, backend="fxslots", options=options)
    started = time.monotonic()
    for _ in range(2):  # refused at every call, not only the first
        with pytest.raises(OptionsError) as ei:
            c(batch())
        assert all(w in str(ei.value) for w in words), str(ei.value)
    assert time.monotonic() - started < 60, "refusing took as long as running"
    assert rings() == [] and all(p.grad is None for p in model.parameters())
    fxslots.reset()
    run_fb(compiled(model, slots=2), [batch(seed=i) for i in range(2)], [1, 0])
    run_fb(eager, [batch(seed=i) for i in range(2)], [1, 0])
    assert_same_grads(model, eager)


def test_mode_is_refused():
    """``mode=`` belongs to inductor; torch.compile passes it on to the backend."""
    refuse = fxb.fxslots_backend(None, [], mode="reduce-overhead")
    with pytest.raises(OptionsError, match="takes no mode="):
        refuse(torch.randn(2))
    model, eager = Net(), Net()
    c = torch.compile(model, backend="fxslots", mode="reduce-overhead")
    with pytest.raises(OptionsError, match="reduce-overhead"):
        c(batch())
    assert rings() == [] and all(p.grad is None for p in model.parameters())
    fxslots.reset()
    run_fb(compiled(model, slots=1), [batch()], [0])
    run_fb(eager, [batch()], [0])
    assert_same_grads(model, eager)


def test_model_that_graph_breaks():
    class Breaks(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x):
            h = torch.tanh(self.a(x))
            torch._dynamo.graph_break()
            return torch.tanh(self.b(h)) * h

    eager, model, ref = Breaks(), Breaks(), Breaks()
    c = compiled(model, slots=2, debug=True)
    c_ref = torch.compile(ref, backend="aot_eager")
    xs = [batch(seed=i) for i in range(4)]
    for fn in (c, c_ref, eager):
        run_fb(fn, xs[:2], [1, 0])
        run_fb(fn, xs[2:], [0, 1])
    assert len(rings()) == 2, "each graph of the break has its own ring"
    assert pending() == 0
    assert_same_grads(model, ref, exact=True)
    assert_same_grads(model, eager)


def test_graph_with_no_saved_tensors():
    class NoSaved(nn.Module):
        def __init__(self):
            super().__init__()
            self.b = nn.Parameter(torch.zeros(8))

        def forward(self, x):
            return x * 2 + self.b

    eager, model = NoSaved(), NoSaved()
    c = compiled(model, slots=1, debug=True)
    xs = [batch(seed=i).requires_grad_() for i in range(3)]
    outs = [c(x) for x in xs]  # three in flight with one slot: nothing needs a slot
    for o in outs:
        o.sum().backward()
    run_fb(eager, [x.detach() for x in xs], [0, 1, 2])
    assert_same_grads(model, eager)
    assert all(torch.equal(x.grad, torch.full_like(x, 2.0)) for x in xs)
    assert arenas() == []


@pytest.mark.parametrize("context", [torch.no_grad, torch.inference_mode],
                         ids=["no_grad", "inference_mode"])
def test_no_grad_and_inference_mode(context):
    eager, model = Net(), Net()
    c = compiled(model, slots=1, debug=True)
    x = batch()
    train_out = c(x)  # a training microbatch holds the only slot
    before = arenas()
    with context():
        for n in (4, 5):
            y = c(batch(n, seed=n))
            with torch.no_grad():
                want = eager(batch(n, seed=n))
            torch.testing.assert_close(y, want, rtol=1e-6, atol=1e-6)
            assert not y.requires_grad
    assert_arenas_unchanged(before, arenas())  # inference needs no slot
    train_out.sum().backward()
    eager(x).sum().backward()
    assert_same_grads(model, eager)
    assert pending() == 0


# A custom op that raises when asked: an exception in the middle of a compiled forward.
_FAIL = {"on": False}


@torch.library.custom_op("fxslots_reliability::maybe_fail", mutates_args=())
def _maybe_fail(x: torch.Tensor) -> torch.Tensor:
    if _FAIL["on"]:
        raise ValueError("injected failure inside a compiled graph")
    return x.clone()


@_maybe_fail.register_fake
def _(x):
    return torch.empty_like(x)


_maybe_fail.register_autograd(lambda ctx, g: g)


def test_exception_half_way_through_forward():
    class Fails(Net):
        def forward(self, x):
            h = torch.tanh(self.a(x))
            h = _maybe_fail(h)
            return torch.tanh(self.b(h))

    eager, model = Fails(), Fails()
    c = compiled(model, slots=1, debug=True)
    x0, x1 = batch(seed=0), batch(seed=1)
    c(x0).sum().backward()
    _FAIL["on"] = True
    try:
        with pytest.raises(ValueError, match="injected failure") as ei:
            c(x1)
    finally:
        _FAIL["on"] = False
    # ``ei`` keeps the exception, so its traceback keeps every frame of the failed forward and
    # their views of the slot, as a logger or debugger holding the error would: the slot must
    # be free anyway, given back explicitly, not when those views die.
    assert ei.value.__traceback__ is not None
    assert pending() == 0, "the failed forward's slot was not released"
    c(x1).sum().backward()  # the next step works, with one slot
    del ei
    eager(x0).sum().backward()
    eager(x1).sum().backward()
    assert_same_grads(model, eager)


@torch.library.custom_op("fxslots_reliability::mark", mutates_args=())
def _mark(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@_mark.register_fake
def _(x):
    return torch.empty_like(x)


# The backward of ``mark`` runs maybe_fail, which raises at run time (when _FAIL is on) inside
# the compiled backward graph.
_mark.register_autograd(lambda ctx, g: _maybe_fail(g))


def test_exception_inside_the_backward():
    """An exception raised inside the compiled backward propagates unchanged; the slot is given
    back at once, even while the caller keeps the exception (and through its traceback the
    backward's arguments, views of the slot), and the next step works with one slot.
    Retrying the failed backward raises autograd's own error, as in eager."""
    class FailsBackward(Net):
        def forward(self, x):
            return torch.tanh(self.b(_mark(torch.tanh(self.a(x)))))

    eager, model = FailsBackward(), FailsBackward()
    c = compiled(model, slots=1, debug=True)
    x0, x1, x2 = batch(seed=0), batch(seed=1), batch(seed=2)
    c(x0).sum().backward()  # compiles the backward
    out = c(x1)
    _FAIL["on"] = True
    try:
        with pytest.raises(ValueError, match="injected failure") as ei:
            out.sum().backward()
    finally:
        _FAIL["on"] = False
    assert ei.value.__traceback__ is not None
    assert pending() == 0, "the failed backward's slot was not released"
    c(x2).sum().backward()  # the failed microbatch's output and its exception still live
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        out.sum().backward()
    del ei, out
    for x in (x0, x2):  # the failed backward accumulated nothing
        eager(x).sum().backward()
    assert_same_grads(model, eager)


def test_exception_between_graphs_releases_the_first_graphs_slot():
    class FailsAfterBreak(Net):
        def forward(self, x, fail: bool):
            h = torch.tanh(self.a(x))
            torch._dynamo.graph_break()
            if fail:
                raise ValueError("injected failure after the first graph")
            return torch.tanh(self.b(h))

    eager, model = FailsAfterBreak(), FailsAfterBreak()
    c = compiled(model, slots=1, debug=True)
    x0, x1 = batch(seed=0), batch(seed=1)
    c(x0, False).sum().backward()
    try:
        c(x1, True)
    except ValueError:
        pass
    else:
        raise AssertionError("no failure")
    assert pending() == 0, "the first graph's slot was not released"
    c(x1, False).sum().backward()
    eager(x0, False).sum().backward()
    eager(x1, False).sum().backward()
    assert_same_grads(model, eager)


def test_debug_env_var_poisons_released_arenas(monkeypatch):
    monkeypatch.setenv("FXSLOTS_DEBUG", "1")
    model = Net()
    c = compiled(model, slots=1)
    c(batch()).sum().backward()
    arena = next(s.arena for r in rings() for s in r.slots if s.arena is not None)
    assert bool((arena == 0xFF).all()), "FXSLOTS_DEBUG=1 did not poison the released arena"


class Unfolds(nn.Module):
    """Saves a self-overlapping unfold view, which no slot layout can hold."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(8, 8)

    def forward(self, x):
        u = torch.tanh(self.a(x)).unfold(1, 4, 2)  # overlapping windows
        return (u * u.exp()).sum(-1)


class StridedSlice(nn.Module):
    """Saves ``h[:, ::2]`` of a (B, 3, 8) activation: shape (B, 2, 8), strides (24, 16, 1), rows
    that end exactly where the next begins. No overlap, so it takes a slot (it fell back once,
    when disjointness was judged by stride x size instead of the span)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(8, 24)

    def forward(self, x):
        s = (self.a(x) * 2).view(x.shape[0], 3, 8)[:, ::2]
        return (torch.tanh(s) * s).sum(-1)


def test_strided_slice_takes_a_slot():
    model, ref = StridedSlice(), StridedSlice()
    c = compiled(model, slots=2)
    c_ref = torch.compile(ref, backend="aot_eager")
    xs = [batch(seed=i) for i in range(2)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for f in (c, c_ref):
            outs = [f(x) for x in xs]
            for o in outs:
                o.sum().backward()
    assert not [w for w in caught if str(w.message).startswith("fxslots")]
    assert fxslots.counters["fallbacks"] == 0 and rings()
    assert_same_grads(model, ref)


def test_fallback_graph_still_trains():
    """A graph fxslots cannot place (a self-overlapping saved view) falls back with one warning
    naming the tensor and the setting, takes no slot, and its gradients are aot_eager's."""
    model, ref, eager = Unfolds(), Unfolds(), Unfolds()
    c = compiled(model, slots=1)
    c_ref = torch.compile(ref, backend="aot_eager")
    xs = [batch(seed=i) for i in range(2)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = [c(x) for x in xs]  # two in flight with one slot: the fallback takes none
    ours = [str(w.message) for w in caught if str(w.message).startswith("fxslots")]
    assert len(ours) == 1, ours
    assert "runs without slots" in ours[0] and "overlaps itself" in ours[0], ours[0]
    assert "strict=True" in ours[0], ours[0]
    assert fxslots.counters["fallbacks"] == 1
    assert arenas() == [] and all(s.microbatch is None for r in rings() for s in r.slots)
    for o in outs:
        o.sum().backward()
    run_fb(c_ref, xs, [0, 1])
    run_fb(eager, xs, [0, 1])
    assert_same_grads(model, ref, exact=True)
    assert_same_grads(model, eager)


def test_fallback_graph_with_strict_raises_and_training_goes_on():
    """strict=True turns the fallback into UnsupportedGraphError at the first call (inside
    Dynamo's BackendCompilerFailed: it is raised while compiling), before any slot exists; the
    same model compiled without strict still trains like eager."""
    model, eager = Unfolds(), Unfolds()
    strict = compiled(model, slots=1, strict=True)
    with pytest.raises(Exception) as ei:
        strict(batch())
    cause = root_cause(ei.value)
    assert isinstance(cause, fxslots.UnsupportedGraphError), repr(ei.value)
    assert "runs without slots" in str(cause) and "(strict=True)" in str(cause), str(cause)
    assert arenas() == [] and all(p.grad is None for p in model.parameters())
    fxslots.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallback warning, checked in the test above
        run_fb(compiled(model, slots=1), [batch(seed=i) for i in range(2)], [1, 0])
    run_fb(eager, [batch(seed=i) for i in range(2)], [1, 0])
    assert_same_grads(model, eager)


@pytest.mark.parametrize("name, default, other, bad", [
    ("kernels", "aten", "inductor", "triton"), ("memsets", "kernels", "nodes", "kernel")])
def test_kernels_env_var_sets_the_default_and_is_checked(monkeypatch, name, default, other, bad):
    """FXSLOTS_KERNELS and FXSLOTS_MEMSETS set their option's default, checked like the
    option (the error names the variable); an explicit option wins."""
    from fxslots.options import Options

    var = f"FXSLOTS_{name.upper()}"
    monkeypatch.setenv(var, other)
    assert getattr(Options(), name) == other
    assert getattr(Options(**{name: default}), name) == default
    monkeypatch.setenv(var, bad)
    with pytest.raises(fxslots.OptionsError,
                       match=f"'{bad}' \\(from the environment variable {var}\\)"):
        Options()
    monkeypatch.setenv(var, other)  # a bad option given beside a good variable: the option's
    with pytest.raises(fxslots.OptionsError, match=f"got '{bad}'$"):
        Options(**{name: bad})
    monkeypatch.delenv(var)
    assert getattr(Options(), name) == default


def test_create_graph_with_grad_kept_records_like_aot_eager():
    """A create_graph=True backward into kept ``.grad`` buffers: autograd adds with a graph
    (``.grad`` then requires grad, as aot_eager's does). Grad mode is off inside AOTAutograd's
    double-backward function, so fxslots added in its graph, leaving ``.grad`` without one
    (found in session 51); it now sees the recording (``_torch.records_graph``)."""
    with torch._functorch.config.patch(donated_buffer=False):  # aot_eager's create_graph
        ours, ref = Net(), Net()
        ref.load_state_dict(ours.state_dict())
        f, g = compiled(ours, slots=1), torch.compile(ref, backend="aot_eager")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the create_graph warning (its own test)
            for step in range(3):
                x = batch(seed=step)
                for fn in (f, g):
                    fn(x).sum().backward(create_graph=step == 2)
    for a, b in zip(ours.parameters(), ref.parameters(), strict=True):
        assert a.grad.requires_grad and b.grad.requires_grad
        assert torch.equal(a.grad, b.grad)


def test_two_heads_backpropagated_one_by_one_are_not_taken_for_create_graph():
    """Found by a review (session 51): ``backward(retain_graph=True)`` for the first of two
    heads was taken for create_graph=True (AOTAutograd's plain path calls the same function,
    with ``double_ctx=None``): a wrong warning, and an error with strict=True."""
    torch.manual_seed(0)
    model, ref = nn.Linear(8, 2), nn.Linear(8, 2)
    ref.load_state_dict(model.state_dict())
    f = torch.compile(model, backend="fxslots", options={"slots": 1, "strict": True})
    g = torch.compile(ref, backend="aot_eager")
    x = batch()
    with torch._functorch.config.patch(donated_buffer=False):  # aot_eager's retain_graph
        for fn in (f, g):
            y = torch.tanh(fn(x))
            y[:, 0].sum().backward(retain_graph=True)
            y[:, 1].sum().backward()
    for a, b in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)
