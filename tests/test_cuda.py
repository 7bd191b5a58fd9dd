"""CUDA graphs on one shared pool (run on the H200: ``pytest -m cuda``)."""

from __future__ import annotations

import copy
import logging
import random
import re

import pytest
import torch

import fxslots
from fxslots import state
from examples.models import MLP
from tests.helpers import (graph_pool_segments, play, schedule_1f1b, schedule_ffbb,
                           train_cuda_head_bitwise, train_under_compiled_autograd, with_caps)

pytestmark = pytest.mark.cuda

SEQS = (8, 16, 24, 32)  # V = 4 shape variants


def make_model(dtype=torch.float32, d=64, layers=4):
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(d, d, bias=False), torch.nn.GELU()]
    return torch.nn.Sequential(*mods).cuda().to(dtype)


def inputs(dtype=torch.float32, d=64, n=4):
    g = torch.Generator(device="cuda").manual_seed(1)
    return {s: [torch.randn(2, s, d, device="cuda", dtype=dtype, generator=g) for _ in range(n)]
            for s in SEQS}


def random_schedule(n, k, rng):
    """A random interleaving with at most k forwards awaiting their backward."""
    ops, fwd, waiting = [], 0, []
    while fwd < n or waiting:
        if fwd < n and len(waiting) < k and (not waiting or rng.random() < 0.5):
            ops.append(("F", fwd)); waiting.append(fwd); fwd += 1
        else:
            ops.append(("B", waiting.pop(rng.randrange(len(waiting)))))
    return ops


def train_both(schedules, *, k=4, dtype=torch.float32, set_to_none=True, steps=2, options=None):
    """Run the same steps eagerly and under fxslots; return the two models."""
    eager, ours = make_model(dtype), make_model(dtype)
    f = torch.compile(ours, backend="fxslots", options={"slots": k, **(options or {})})
    xs = inputs(dtype)
    for _ in range(steps):
        for s in SEQS:
            for sched in schedules:
                play(eager, xs[s], sched)
                play(f, xs[s], sched)
                if set_to_none:
                    _compare(eager, ours, dtype)
                    eager.zero_grad(set_to_none=True)
                    ours.zero_grad(set_to_none=True)
    _compare(eager, ours, dtype)
    return eager, ours, f, xs


def _compare(eager, ours, dtype):
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=1e-4, rtol=1e-4)
    for a, b in zip(eager.parameters(), ours.parameters(), strict=True):
        assert (a.grad is None) == (b.grad is None)
        if a.grad is not None:
            torch.testing.assert_close(b.grad, a.grad, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_variants_and_schedules_match_eager(dtype):
    rng = random.Random(0)
    schedules = [schedule_ffbb(4), schedule_1f1b(4, 2)] + [random_schedule(4, 4, rng)
                                                         for _ in range(3)]
    _, _, f, _ = train_both(schedules, dtype=dtype)  # f keeps the model (and its graphs) alive
    # One live graph per (shape variant, slot, graph): V = 4 x K = 4 x 3 at most (forward,
    # the backward that returns gradients, the one that adds them into .grad).
    live = sum(len(v.executor.graphs) for g in fxslots.regions() for v in g.live_variants())
    assert 0 < live <= 4 * 4 * 3


def test_captures_stop_growing_after_warm_up():
    _, _, f, xs = train_both([schedule_ffbb(4), schedule_1f1b(4, 2)], steps=2)
    before = fxslots.counters["captures"]
    for s in SEQS:
        play(f, xs[s], schedule_ffbb(4))
        play(f, xs[s], schedule_1f1b(4, 2))
    assert fxslots.counters["captures"] == before
    assert fxslots.counters["compiles"] <= len(SEQS)


def test_persistent_grad_accumulation_matches_eager():
    # reduce-overhead fails here: .grad would alias pool memory a later replay overwrites.
    train_both([schedule_ffbb(4), schedule_1f1b(4, 2)], set_to_none=False, steps=3)


def test_grads_as_views_of_a_flat_buffer():
    eager, ours = make_model(), make_model()
    flats = []
    for m in (eager, ours):
        flat = torch.zeros(sum(p.numel() for p in m.parameters()), device="cuda")
        i = 0
        for p in m.parameters():
            p.grad = flat[i:i + p.numel()].view_as(p)
            i += p.numel()
        flats.append(flat)
    f = torch.compile(ours, backend="fxslots", options={"slots": 4})
    xs = inputs()
    for _ in range(3):
        for s in SEQS:
            play(eager, xs[s], schedule_ffbb(4))
            play(f, xs[s], schedule_ffbb(4))
    for m, flat in zip((eager, ours), flats, strict=True):
        assert all(p.grad.untyped_storage().data_ptr() == flat.data_ptr() for p in m.parameters())
    torch.testing.assert_close(flats[1], flats[0], atol=1e-4, rtol=1e-4)


def test_slot_memory_is_k_times_the_largest_variant():
    _, _, f, _ = train_both([schedule_ffbb(4)], steps=1)
    (region,) = fxslots.regions()
    ring = region.ring
    largest = max(lay.nbytes for v in region.live_variants() for lay in v.layouts.values())
    assert [s.nbytes for s in ring.slots] == [largest] * 4


def test_too_many_in_flight_raises_before_writing():
    m = make_model()
    f = torch.compile(m, backend="fxslots", options={"slots": 2})
    x = inputs()[8]
    outs = [f(x[0]), f(x[1])]
    (ring,) = [g.ring for g in fxslots.regions()]
    before = [s.arena.clone() for s in ring.slots]
    with pytest.raises(fxslots.SlotsExhaustedError, match="slots"):
        f(x[2])
    assert all(torch.equal(a, s.arena) for a, s in zip(before, ring.slots, strict=True))
    for o in outs:
        o.float().sum().backward()
    f(x[2]).float().sum().backward()


def test_debug_mode_poisons_released_arenas():
    m = make_model()
    f = torch.compile(m, backend="fxslots", options={"slots": 1, "debug": True})
    x = inputs()[8]
    for i in range(3):  # warm-up, capture, replay
        f(x[i]).float().sum().backward()
    (ring,) = [g.ring for g in fxslots.regions()]
    assert bool((ring.slots[0].arena == 0xFF).all())


def test_cudagraphs_off_runs_eagerly_and_matches():
    train_both([schedule_ffbb(4)], options={"cudagraphs": False}, steps=1)
    assert fxslots.counters["captures"] == 0


class _MutatesInput(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(64, 64)

    def forward(self, x):
        x.mul_(2)  # AOTAutograd keeps this in the graph as copy_(x, ...): x is staged
        return self.lin(x).tanh()


def test_in_place_input_mutation_reaches_the_caller_under_replay():
    torch.manual_seed(0)
    eager = _MutatesInput().cuda()
    ours = _MutatesInput().cuda()
    ours.load_state_dict(eager.state_dict())
    f = torch.compile(ours, backend="fxslots", options={"slots": 2})
    for i in range(4):  # warm-up, capture, replays
        x = torch.randn(8, 64, device="cuda")
        xe, xo = x.clone(), x.clone()
        eager(xe).sum().backward()
        f(xo).sum().backward()
        assert torch.equal(xo, xe), f"call {i}: the caller's tensor lost the mutation"
    _compare(eager, ours, torch.float32)


# above:4096 offloads the static first variant (4 KiB tensors), not the dynamic ones
@pytest.mark.parametrize("offload", ["all", "above:4096"])
def test_offloaded_activations_match_eager_under_replay(offload):
    _, _, f, _ = train_both([schedule_ffbb(4), schedule_1f1b(4, 2)], options={"offload": offload},
                            steps=2)
    hosts = [s.host_arena for r in [g.ring for g in fxslots.regions()] for s in r.slots
             if s.host_arena is not None]
    assert hosts and all(h.is_pinned() for h in hosts)
    assert fxslots.counters["captures"] > 0


def _settled_reserved() -> int:
    import gc

    gc.collect()
    torch.cuda.synchronize()
    torch._C._cuda_clearCublasWorkspaces()  # a warm-up's cuBLAS workspace is not ours
    torch.cuda.empty_cache()
    return torch.cuda.memory_reserved()


@pytest.mark.parametrize("how", ["delete the model", "fxslots.reset", "torch.compiler.reset"])
@pytest.mark.parametrize("options", [{}, {"offload": "all"}], ids=["device", "offload"])
def test_memory_comes_back_when_the_model_goes(how, options):
    import weakref

    fxslots.reset()
    before = _settled_reserved()
    eager, ours, f, xs = train_both([schedule_ffbb(2), schedule_1f1b(2, 2)], k=2, steps=2,
                                    options=options)
    assert fxslots.counters["captures"] > 0
    hosts = [weakref.ref(s.host_arena) for g in fxslots.regions() for s in g.ring.slots
             if s.host_arena is not None]
    assert bool(hosts) == bool(options)
    if how == "delete the model":
        del eager, ours, f, xs
    elif how == "fxslots.reset":
        fxslots.reset()
        del eager, ours, f, xs
    else:
        torch.compiler.reset()
        del eager, ours, f, xs
    after = _settled_reserved()
    assert after <= before, f"{(after - before) / 2**20:.1f} MiB still reserved after {how}"
    assert [h() for h in hosts] == [None] * len(hosts)


@pytest.mark.parametrize("offload,window,join_every", [
    ("all", "auto", None), (40_000, "auto", None), ("all", 1, None), ("all", "auto", 1.0)],
    ids=["all", "budget", "all-window-1", "all-joins-merged"])
def test_offload_stays_ordered_with_a_slow_side_stream(monkeypatch, offload, window,
                                                       join_every):
    """Issue 10's safety rule: every side-stream copy delayed by a spin kernel, under capture
    and replay; the waits must keep each copy ordered against what reads and reuses its bytes
    (a missing wait reads unfinished copies or overwrites reloads: wrong gradients). A one-byte
    window joins each copy before the next starts and reloads each group into bytes the group
    before it has just released. With every join of a graph merged into one wait, the waits
    that do not wait rely on that one, for the last copy, having joined theirs."""
    from fxslots import streams

    if join_every is not None:
        with_caps(monkeypatch, join_every=join_every)

    def delayed(fn, direction):
        def run(*args):
            device = next(a for a in args if isinstance(a, torch.Tensor)).device if \
                direction == "d2h" else args[0]
            with torch.cuda.stream(streams.side_stream(device, direction)):
                torch.cuda._sleep(2_000_000)  # ~1 ms at H200 clocks
            return fn(*args)
        return run

    monkeypatch.setattr(streams, "offload", delayed(streams.offload, "d2h"))
    monkeypatch.setattr(streams, "reload", delayed(streams.reload, "h2d"))
    _, _, f, _ = train_both([schedule_ffbb(4), schedule_1f1b(4, 2)],
                            options={"offload": offload, "offload_window": window}, steps=2)
    assert fxslots.counters["captures"] > 0
    (region,) = fxslots.regions()
    offloaded = [v.plan.offloaded_bytes != 0 for v in region.live_variants()]
    # "all" offloads in every variant; a budget only where a variant does not fit it.
    assert all(offloaded) if offload == "all" else any(offloaded)


@pytest.mark.cuda
def test_auto_offload_times_the_real_host_link(caplog):
    """The link ``offload="auto"`` plans with is the one measured on real copies (H200 run 15:
    timed on the compile's fake tensors it came out unbounded, and auto moved 896 of 960 MiB),
    both ways, and it is the slower way's figure."""
    from fxslots import costs

    costs._LINK.clear()
    model = MLP(256, 256, 4).cuda()
    c = torch.compile(model, backend="fxslots", options={"offload": "auto"})
    with caplog.at_level(logging.INFO, logger="fxslots.costs"):
        c(torch.randn(64, 256, device="cuda")).sum().backward()
    (link,) = costs._LINK.values()
    assert 1e9 < link < 1e12, link
    (line,) = [r.getMessage() for r in caplog.records if "host link of cuda" in r.getMessage()]
    rates = [float(w) * 1e9 for w in re.findall(r"([0-9.]+) GB/s", line)]
    assert "to the device" in line and "to the host" in line and len(rates) == 2, line
    assert abs(link - min(rates)) <= 0.051e9, (link, line)


def _conv_net():
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1, groups=4), nn.BatchNorm2d(16), nn.Flatten(),
        nn.Linear(16 * 64, 10)).cuda()


@pytest.mark.parametrize("kernels", ["aten", "inductor"])
def test_convolutions_write_their_slot_through_cudnn(kernels):
    """A 2-d single-group convolution whose output is saved (for batch norm) is computed into
    its slot by cuDNN (fxslots::cudnn_convolution.out: what aten.convolution runs on CUDA);
    the grouped one is copied. Gradients and running statistics match eager as closely as
    the same model with every group copied does (cuDNN convolutions run in TF32 by default)."""
    x = torch.randn(8, 3, 8, 8, device="cuda")
    report = fxslots.explain(_conv_net(), x, kernels=kernels)
    forward = report.graphs[0].forward_after
    assert forward.count("cudnn_convolution.out") == 2, forward
    fxslots.reset()
    e = _conv_net()
    models = {name: _conv_net() for name in ("routed", "copied")}
    compiled = {name: torch.compile(m, backend="fxslots", options={
        "slots": 1, "kernels": kernels, "copy_free": name == "routed"})
        for name, m in models.items()}
    worst = dict.fromkeys(models, 0.0)
    for step in range(5):
        x = torch.randn(8, 3, 8, 8, device="cuda")
        e(x).square().mean().backward()
        for name, c in compiled.items():
            c(x).square().mean().backward()
            for p, q in zip(models[name].parameters(), e.parameters(), strict=True):
                worst[name] = max(worst[name], (p.grad - q.grad).abs().max().item())
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4)
            for a, b in zip(models[name].buffers(), e.buffers(), strict=True):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
            models[name].zero_grad(set_to_none=True)
        e.zero_grad(set_to_none=True)
    print(f"max |grad - eager's| over 5 steps: {worst}")
    assert worst["routed"] <= 2 * worst["copied"] + 1e-5, worst
    assert fxslots.counters["captures"] > 0


@pytest.mark.parametrize("kernels", ["aten", "inductor"])
def test_a_gradient_that_is_a_saved_tensor_outlives_the_slot_on_cuda(kernels):
    """The backward returns a saved tensor as x's gradient (passes/unalias.py clones it): the
    x.grad a caller keeps stays what it was while later forwards reuse the slot."""
    from tests.test_runtime import _UsesReturnsSaved

    torch.manual_seed(0)
    m, e = _UsesReturnsSaved().cuda(), _UsesReturnsSaved().cuda()
    e.load_state_dict(m.state_dict())
    c = torch.compile(m, backend="fxslots", options={"slots": 1, "kernels": kernels})
    held = []
    for _ in range(5):
        x = torch.randn(8, 16, device="cuda", requires_grad=True)
        xe = x.detach().clone().requires_grad_()
        c(x).sum().backward()
        e(xe).sum().backward()
        held.append((x.grad, xe.grad))
    torch.cuda.synchronize()
    assert fxslots.counters["captures"] > 0
    for step, (got, want) in enumerate(held):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=f"step {step}")


def test_prepare_in_flight_gives_each_microbatch_its_own_slot_on_cuda():
    """GPipe order over the four shapes, one microbatch each: after
    ``prepare(in_flight=True)`` each arena holds its own microbatch's bytes (the default
    prepare grows all four to the largest), and training in that order replays without a
    capture, with eager's gradients (tests/test_prepare.py runs the same under the stand-in)."""
    eager, ours = make_model(), make_model()
    f = torch.compile(ours, backend="fxslots", options={"slots": 4})
    xs = [inputs()[s][0] for s in SEQS]
    report = fxslots.prepare(f, xs, in_flight=True)
    (region,) = fxslots.regions()
    sizes = [s.nbytes for s in region.ring.slots]
    assert sizes == sorted(sizes) and len(set(sizes)) == 4, sizes
    assert report.captures > 0
    captures = fxslots.counters["captures"]
    for _ in range(2):
        for m in (eager, ours):
            m.zero_grad(set_to_none=True)
        play(eager, xs, schedule_ffbb(len(xs)))
        play(f, xs, schedule_ffbb(len(xs)))
    assert fxslots.counters["captures"] == captures, "prepare(in_flight=True) missed a slot"
    assert [s.nbytes for s in region.ring.slots] == sizes
    _compare(eager, ours, torch.float32)


def test_a_lasting_buffer_never_keeps_a_free_segment_reserved():
    """An arena or output buffer is allocated while a variant warms up, when the allocator
    caches the free segments of that step's temporaries: carved out of one, it would keep the
    whole segment reserved beside it for the rest of training (heavy's output buffer held 62 MiB
    that way, H200 run 34a). Sizes far above any hole a test before left in a live segment."""
    from fxslots.runtime.alloc import lasting

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_reserved()
    transient = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    del transient  # its segment stays cached, free
    assert torch.cuda.memory_reserved() == base + (1 << 30)
    kept = lasting(512 << 20, torch.device("cuda"))
    assert torch.cuda.memory_reserved() == base + (512 << 20)
    del kept


def test_fused_accumulation_under_real_graphs_stays_within_rounding_of_eager():
    """grad_accumulation="fused" on the GPU: captured backwards add each weight gradient into
    .grad with cuBLAS's beta=1 GEMM; over steps of three accumulated microbatches the sums stay
    within float32 rounding of eager's (one rounding of each sum instead of two). ATen kernels
    whatever FXSLOTS_KERNELS says: under Inductor "fused" adds as "graph" does (README)."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(256, 256, bias=False), torch.nn.GELU(),
                            torch.nn.Linear(256, 512)).cuda()
    e = copy.deepcopy(m)
    c = torch.compile(m, backend="fxslots", options={"slots": 1, "grad_accumulation": "fused",
                                                       "kernels": "aten"})
    g = torch.Generator(device="cuda").manual_seed(1)
    for _ in range(5):
        for _ in range(3):
            x = torch.randn(64, 256, device="cuda", generator=g)
            c(x).square().mean().backward()
            e(x).square().mean().backward()
        for a, b in zip(m.parameters(), e.parameters(), strict=True):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6)
        m.zero_grad(set_to_none=False)
        e.zero_grad(set_to_none=False)
    (region,) = fxslots.regions()
    (v,) = region.live_variants()
    assert fxslots.counters["captures"] > 0
    assert [n.target for n in v.accumulate.captured.graph.nodes].count(
        torch.ops.aten.addmm_.default) == 2


class _LossHead(torch.nn.Module):
    """A language model's loss head: the forward's largest block is its bfloat16 logits, the
    backward's the float32 gradient of the log-probabilities, twice as large."""

    def __init__(self):
        super().__init__()
        self.out = torch.nn.Linear(256, 8192, bias=False, dtype=torch.bfloat16)

    def forward(self, x, targets):
        return torch.nn.functional.cross_entropy(self.out(x).float(), targets)


def test_cuda_the_forward_and_backward_cut_their_blocks_from_one_segment():
    """Real CUDA graphs, gradients bitwise equal to eager's every step; the pool's segments
    of more than the allocator's small ones: the room alone."""
    if fxslots.Options().kernels == "inductor":
        pytest.skip("the room is sized by the graphs' nodes under ATen kernels only")
    compiled = train_cuda_head_bitwise(_LossHead, 2048, 256, 8192)  # noqa: F841 - its pool lives
    torch.cuda.synchronize()
    assert fxslots.counters["captures"] == 2
    (room,) = [r.room for r in state.pools.values()]
    large = [s for s in graph_pool_segments() if s > 2 * 2**20]
    print(f"room {room / 2**20:.1f} MiB; pool segments (MiB): "
          f"{[round(s / 2**20, 1) for s in graph_pool_segments()]}")
    assert room >= 2048 * 8192 * 4 and large == [_pool_rounded(room)], (room, large)


def _pool_rounded(nbytes: int) -> int:
    """The allocator's size for a large block: a multiple of 2 MiB."""
    return -(-nbytes // 2**21) * 2**21


@pytest.mark.parametrize("where", ["step", "backward"])
def test_compiled_autograd_under_real_graphs(where, caplog):
    """Compiled autograd runs its own copy of the backward graph on the views a replayed
    forward wrote into the slot: gradients match eager's every step, with one slot, and the
    slot its traces keep is left to them (``SlotRing._disown``) instead of refusing a forward."""
    model, ref = make_model(), make_model()
    f = torch.compile(model, backend="fxslots", options={"slots": 1})
    captures = fxslots.counters["captures"]

    def close(a, b, step):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=str(step))
    train_under_compiled_autograd(f, model, ref, inputs()[16] * 2, where, close)
    assert fxslots.counters["captures"] > captures  # the forward replayed a real graph
    assert sum(r.ring.orphans for r in fxslots.regions()) >= 1
    assert any("outlived its autograd graph" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("norm", ["batch"])
def test_mixed_dtype_norms_under_real_graphs(norm):
    """A bf16 activation into a batch norm with fp32 parameters (autocast's convolution into
    it): its statistics are fp32 on CUDA, as torch's fake kernels on CUDA know
    (``passes/retype.py`` changes nothing there), saved in fp32 slots, and the steps that
    capture and replay match aot_eager's, running statistics included. (CUDA's layer and group
    norms refuse fp32 parameters over a bf16 input, in eager too: H100 run 67a.)"""
    from tests.helpers import compiled_twins
    from tests.test_numerics import _MixedNorm, _mixed_input

    ours, ref, f, g = compiled_twins(lambda: _MixedNorm(norm, torch.bfloat16).cuda(),
                                     {"recompute": "none", "slots": 1})
    captures = fxslots.counters["captures"]
    for step in range(4):
        x = _mixed_input(norm, torch.bfloat16, 2).cuda()
        outs = [f(x), g(x)]
        for o in outs:
            o.float().square().sum().backward()
        torch.testing.assert_close(outs[0], outs[1], msg=str(step))
        for p, q in zip(ours.state_dict().values(), ref.state_dict().values(), strict=True):
            torch.testing.assert_close(p, q, msg=str(step))
        for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, msg=str(step))
    assert fxslots.counters["captures"] > captures


@pytest.mark.cuda
@pytest.mark.parametrize("layout", ["transposed", "channels_last"])
def test_batch_norm_over_a_sparse_or_channels_last_input_trains_as_aot_eager(layout):
    """``tests/test_routes.py``'s batch norm over a transposed input (whose CPU out= kernel
    computes wrong values; CUDA's is right, run 68e, so the route stays on CUDA) and over
    channels_last, on CUDA under CUDA graphs: outputs, gradients and running statistics
    aot_eager's."""
    from tests.helpers import compiled_twins
    from tests.test_routes import _BatchNormOver

    ours, ref, f, g = compiled_twins(lambda: _BatchNormOver(layout).cuda(), {"slots": 1})
    shape = (2, 5, 8) if layout == "transposed" else (2, 8, 4, 4)
    for step in range(4):
        x = torch.randn(shape, device="cuda")
        if layout == "channels_last":
            x = x.to(memory_format=torch.channels_last)
        outs = [f(x), g(x)]
        for o in outs:
            o.square().mean().backward()
        torch.testing.assert_close(outs[0], outs[1], msg=str(step))
        for p, q in zip(ours.state_dict().values(), ref.state_dict().values(), strict=True):
            torch.testing.assert_close(p, q, msg=str(step))
        for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, msg=str(step))
