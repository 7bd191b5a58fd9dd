"""The schedule fuzzer's grammar: random small models, shape variants and F/B interleavings.

A :class:`Case` is plain data (its ``repr`` is a runnable repro). :func:`draw_case` builds one
from any source of choices (hypothesis' ``st.data()`` through :class:`HypothesisDraw`, or a seeded
``random.Random`` through :class:`RandomDraw`, which the GPU profile uses because the GPU machine
may lack hypothesis). :func:`check_case` compiles the model once with fxslots and once with the
matching ``aot_eager`` backend (same partitioner, so any difference is fxslots' fault), runs every
schedule of the case on both and on plain eager, and compares:

- fxslots against aot_eager: bitwise (``torch.equal``) when ``exact``, else a tight tolerance;
- fxslots against eager: a tight tolerance (eager skips AOTAutograd's graphs, so ulps may move).

Compared: every microbatch's user outputs, its input's gradient, its mutated buffer, and the
accumulated ``.grad`` of every parameter after each schedule (persistent buffers; a ``Z`` event
is ``zero_grad(set_to_none=False)``). After each schedule no slot may be left pending.

Repro of a failure printed by the test::

    python3 -c "from tests.fuzz_models import *; check_case(Case(...))"
"""

from __future__ import annotations

import contextlib
import copy
import math
import random
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch import nn

D = 8  # feature width of every fuzz model; divisible by 2 and 4

OPS: tuple[str, ...] = (
    "linear",          # nn.Linear
    "matmul",          # h @ W with a parameter W
    "attention",       # (h @ h^T).softmax() @ h: matmul, transpose, softmax
    "softmax",
    "layer_norm",
    "dropout",         # p=0.25, seeded before every forward
    "view_heads",      # view to heads, transpose, pointwise, transpose back, reshape
    "transpose_mm",    # h @ (h^T @ h): saved transposed views
    "expand",          # a (B, 1, D) statistic expanded over T: saved stride-0 view
    "slice",           # last-dim halves, recombined with cat
    "strided_slice",   # h[:, ::2]: a non-contiguous saved view
    "inplace_buffer",  # buf.add_(...) on a non-grad user input, then read
    "inplace_view",    # in-place update of a slice of an intermediate
    "saved_twice",     # one tensor (and a view of it) saved by several backward users
    "custom_function", # a torch.autograd.Function with ctx.save_for_backward
    "scaled_tensor",   # an FP8-style wrapper subclass (data, scale) fed to a matmul
    "float64",         # a float64 island: mixed itemsizes in one arena
    "mask",            # masked_fill: a saved bool mask
)


# ----------------------------------------------------------------------------- model parts


class ScaledTanh(torch.autograd.Function):
    """A custom Function that saves its input and its output."""

    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(x, y)
        return y * 2

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * 2 * (1 - y * y) + 0.0 * x


class ScaledTensor(torch.Tensor):
    """Flattens to two tensors, ``_data`` and ``_scale``, the way FP8 wrappers hold an
    activation: its value is ``_data * _scale``. Transposes and detaches stay wrapped; every
    other op sees the dequantized value and returns a plain tensor."""

    @staticmethod
    def __new__(cls, data, scale):
        return torch.Tensor._make_wrapper_subclass(
            cls, data.shape, strides=data.stride(), storage_offset=data.storage_offset(),
            dtype=data.dtype, device=data.device, requires_grad=False)

    def __init__(self, data, scale):
        self._data = data
        self._scale = scale

    def __tensor_flatten__(self):
        return ["_data", "_scale"], None

    @staticmethod
    def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
        return ScaledTensor(inner["_data"], inner["_scale"])

    def __repr__(self):
        return f"ScaledTensor({self._data!r}, scale={self._scale!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        aten = torch.ops.aten
        if func in (aten.detach.default, aten.alias.default, aten.t.default,
                    aten.transpose.int):
            t = args[0]
            return ScaledTensor(func(t._data, *args[1:], **kwargs), t._scale)

        def unwrap(t):
            return t._data * t._scale if isinstance(t, ScaledTensor) else t

        return func(*pytree.tree_map(unwrap, args), **pytree.tree_map(unwrap, kwargs))


class ToScaled(torch.autograd.Function):
    """Quantize (coarsely round) to a ScaledTensor; straight-through gradient."""

    @staticmethod
    def forward(ctx, x):
        scale = x.detach().abs().amax().clamp(min=1e-3) / 4
        data = torch.round(x / scale * 64) / 64
        return ScaledTensor(data, scale)

    @staticmethod
    def backward(ctx, g):
        return g


class FuzzModel(nn.Module):
    """``forward(x, buf)``: ``x`` is ``(B, T, D)``, ``buf`` is ``(D,)`` and may be updated in
    place. Every op maps ``(B, T, D)`` to ``(B, T, D)``."""

    def __init__(self, ops: Sequence[str], mutate_input: bool, two_outputs: bool, seed: int):
        super().__init__()
        self.ops = tuple(ops)
        self.mutate_input = mutate_input
        self.two_outputs = two_outputs
        g = torch.Generator().manual_seed(seed)
        self.linears = nn.ModuleList()
        self.weights = nn.ParameterList()
        self.norms = nn.ModuleList()
        for op in self.ops:
            if op == "linear":
                lin = nn.Linear(D, D)
                with torch.no_grad():
                    lin.weight.copy_(torch.randn(D, D, generator=g) / math.sqrt(D))
                    lin.bias.copy_(torch.randn(D, generator=g) * 0.1)
                self.linears.append(lin)
            elif op in ("matmul", "scaled_tensor"):
                self.weights.append(nn.Parameter(torch.randn(D, D, generator=g) / math.sqrt(D)))
            elif op == "layer_norm":
                ln = nn.LayerNorm(D)
                with torch.no_grad():
                    ln.weight.copy_(1 + 0.1 * torch.randn(D, generator=g))
                    ln.bias.copy_(0.1 * torch.randn(D, generator=g))
                self.norms.append(ln)

    def forward(self, x, buf):
        if self.mutate_input:
            x.mul_(1.5)
        h = x
        li = wi = ni = 0
        for op in self.ops:
            b, t, d = h.shape
            if op == "linear":
                h = self.linears[li](h)
                li += 1
            elif op == "matmul":
                h = h @ self.weights[wi]
                wi += 1
            elif op == "attention":
                a = (h @ h.transpose(-2, -1)) * (1.0 / math.sqrt(d))
                h = a.softmax(dim=-1) @ h
            elif op == "softmax":
                h = h.softmax(dim=-1) * d
            elif op == "layer_norm":
                h = self.norms[ni](h)
                ni += 1
            elif op == "dropout":
                h = F.dropout(h, p=0.25, training=True)
            elif op == "view_heads":
                z = h.view(b, t, 2, d // 2).transpose(1, 2)
                z = torch.sin(z) * z
                h = z.transpose(1, 2).reshape(b, t, d)
            elif op == "transpose_mm":
                h = torch.tanh(h @ (h.transpose(1, 2) @ h) / (t * d))
            elif op == "expand":
                e = torch.exp(h.mean(1, keepdim=True).clamp(-4, 4)).expand(b, t, d)
                h = h * e
            elif op == "slice":
                lo, hi = h[..., : d // 2], h[..., d // 2:]
                h = torch.cat([lo * torch.sigmoid(hi), torch.tanh(lo) * hi], dim=-1)
            elif op == "strided_slice":
                s = h[:, ::2]
                h = h + (torch.tanh(s) * s).sum(1, keepdim=True) / s.shape[1]
            elif op == "inplace_buffer":
                buf.add_(h.detach().mean(dim=(0, 1)))
                h = h * torch.sigmoid(buf)
            elif op == "inplace_view":
                h = h * 1.5
                h[..., :2].mul_(torch.sigmoid(h[..., 2:4]))
            elif op == "saved_twice":
                a = torch.tanh(h)
                h = a * a + a.transpose(1, 2).transpose(1, 2) * h
            elif op == "custom_function":
                h = ScaledTanh.apply(h)
            elif op == "scaled_tensor":
                q = ToScaled.apply(h.reshape(b * t, d))
                h = torch.mm(q, self.weights[wi]).view(b, t, d)
                wi += 1
            elif op == "float64":
                z = h.double()
                h = (torch.sin(z) * z).float()
            elif op == "mask":
                h = h.masked_fill(h > 0.5, 0.25) * h
            else:
                raise AssertionError(op)
        out = torch.tanh(h)
        if self.two_outputs:
            return out, h.sum(dim=-1)
        return (out,)


# ----------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One fuzz example. ``schedules``: tuples of events ``("F", mb, variant)`` (forward of
    microbatch ``mb`` with shape ``shapes[variant]``), ``("B", mb)`` (its backward), ``("D", mb)``
    (drop it: outputs freed without a backward), ``("Z",)`` (zero_grad(set_to_none=False))."""

    ops: tuple[str, ...]
    shapes: tuple[tuple[int, int], ...]
    schedules: tuple[tuple[tuple, ...], ...]
    slots: int = 2
    dynamic: bool = False
    mutate_input: bool = False
    two_outputs: bool = False
    options: tuple[tuple[str, Any], ...] = ()
    seed: int = 0

    def max_in_flight(self) -> int:
        most = 0
        for sched in self.schedules:
            live: set[int] = set()
            for ev in sched:
                if ev[0] == "F":
                    live.add(ev[1])
                elif ev[0] in "BD":
                    live.discard(ev[1])
                most = max(most, len(live))
        return most


class RandomDraw:
    """Choices from a seeded ``random.Random`` (no shrinking)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, seq: Sequence[Any]) -> Any:
        return seq[self.rng.randrange(len(seq))]

    def boolean(self) -> bool:
        return self.rng.random() < 0.5


class HypothesisDraw:
    """Choices from hypothesis' ``st.data()`` (shrinks on failure)."""

    def __init__(self, data: Any):
        from hypothesis import strategies as st

        self.data = data
        self.st = st

    def integer(self, lo: int, hi: int) -> int:
        return self.data.draw(self.st.integers(lo, hi))

    def choice(self, seq: Sequence[Any]) -> Any:
        return self.data.draw(self.st.sampled_from(list(seq)))

    def boolean(self) -> bool:
        return self.data.draw(self.st.booleans())


def draw_schedule(draw: Any, slots: int, n_variants: int) -> tuple[tuple, ...]:
    """A random F/B interleaving of 1..5 microbatches, never more than ``slots`` in flight;
    backwards run in any order; sometimes a microbatch is dropped instead."""
    n = draw.integer(1, 5)
    todo = list(range(n))
    live: list[int] = []
    events: list[tuple] = []
    while todo or live:
        can_fwd = bool(todo) and len(live) < slots
        # 0: forward; 1..len(live): end that microbatch
        k = draw.integer(0 if can_fwd else 1, len(live))
        if k == 0:
            mb = todo.pop(0)
            live.append(mb)
            events.append(("F", mb, draw.integer(0, n_variants - 1)))
        else:
            mb = live.pop(k - 1)
            events.append(("D", mb) if draw.integer(0, 7) == 0 else ("B", mb))
            if draw.integer(0, 9) == 0:
                events.append(("Z",))
    return tuple(events)


def draw_case(draw: Any, *, max_ops: int = 4, max_variants: int = 3,
              max_schedules: int = 3) -> Case:
    n_ops = draw.integer(1, max_ops)
    ops = tuple(draw.choice(OPS) for _ in range(n_ops))
    n_var = draw.integer(1, max_variants)
    shapes = []
    for _ in range(n_var):
        shape = (draw.integer(1, 4), draw.integer(1, 6))
        if shape not in shapes:
            shapes.append(shape)
    slots = draw.integer(1, 3)
    schedules = tuple(draw_schedule(draw, slots, len(shapes))
                      for _ in range(draw.integer(1, max_schedules)))
    options = [("debug", draw.boolean())]
    if draw.integer(0, 3) == 0:
        options.append(("copy_free", False))
    if draw.integer(0, 3) == 0:
        options.append(("alignment", 16))
    if draw.integer(0, 3) == 0:
        options.append(("partitioner", "default"))
    if draw.integer(0, 3) == 0:
        options.append(("recompute", "pointwise"))
    if draw.integer(0, 2) == 0:  # random offload choices: every group, or the bigger ones
        options.append(("offload", draw.choice(["all", "above:64", "above:512"])))
    return Case(
        ops=ops,
        shapes=tuple(shapes),
        schedules=schedules,
        slots=slots,
        dynamic=draw.boolean(),
        mutate_input=draw.integer(0, 3) == 0,
        two_outputs=draw.boolean(),
        options=tuple(options),
        seed=draw.integer(0, 2**16),
    )


# ----------------------------------------------------------------------------- running


@dataclass
class Trace:
    """What one run of one schedule produced, by name, for comparison."""

    values: dict[str, torch.Tensor] = field(default_factory=dict)

    def put(self, name: str, t: torch.Tensor | None) -> None:
        if t is not None:
            self.values[name] = t.detach().clone()


def _inputs(case: Case, sched_idx: int, mb: int, variant: int, device: str):
    b, t = case.shapes[variant]
    g = torch.Generator().manual_seed(case.seed * 7919 + sched_idx * 101 + mb)
    x_leaf = torch.randn(b, t, D, generator=g).to(device).requires_grad_()
    buf = torch.randn(D, generator=g).to(device)
    return x_leaf, buf, g


def run_schedule(fn: Any, module: nn.Module, case: Case, sched_idx: int, device: str,
                 ring_check: Any = None) -> Trace:
    """Run ``case.schedules[sched_idx]`` on ``fn`` (a compiled ``module``, or ``module``)."""
    trace = Trace()
    live: dict[int, tuple] = {}
    for ev in case.schedules[sched_idx]:
        if ev[0] == "F":
            _, mb, var = ev
            x_leaf, buf, g = _inputs(case, sched_idx, mb, var, device)
            x = x_leaf * 1.0 if case.mutate_input else x_leaf  # in-place needs a non-leaf
            torch.manual_seed(case.seed + 1000 * sched_idx + mb)  # dropout
            outs = fn(x, buf)
            for i, o in enumerate(outs):
                trace.put(f"mb{mb}.out{i}", o)
            trace.put(f"mb{mb}.buf", buf)
            grads = [torch.randn(o.shape, generator=g).to(device) for o in outs]
            live[mb] = (x_leaf, x, outs, grads)
            del x_leaf, x, outs, grads, o  # only `live` may keep the microbatch's graph
        elif ev[0] == "B":
            x_leaf, x, outs, grads = live.pop(ev[1])
            torch.autograd.backward(outs, grads)
            trace.put(f"mb{ev[1]}.xgrad", x_leaf.grad)
            del x_leaf, x, outs, grads
        elif ev[0] == "D":
            del live[ev[1]]
        elif ev[0] == "Z":
            module.zero_grad(set_to_none=False)
        if ring_check is not None:
            ring_check(len(live))
    assert not live
    for name, p in module.named_parameters():
        trace.put(f"grad.{name}", p.grad)
    return trace


def compare(got: Trace, want: Trace, *, exact: bool, rtol: float = 1e-5, atol: float = 1e-5,
            what: str = "") -> None:
    assert got.values.keys() == want.values.keys(), (
        f"{what}: different results: {sorted(got.values.keys() ^ want.values.keys())}")
    for name, w in want.values.items():
        g = got.values[name]
        assert g.shape == w.shape and g.dtype == w.dtype, (what, name, g.shape, w.shape)
        if exact:
            ok = torch.equal(g, w)
        else:
            ok = torch.allclose(g, w, rtol=rtol, atol=atol)
        if not ok:
            diff = (g.double() - w.double()).abs()
            raise AssertionError(
                f"{what}: {name} differs ({'bitwise' if exact else f'rtol={rtol} atol={atol}'}):"
                f" max |diff| {diff.max().item():.3e} at {int(diff.argmax())}, nan in got "
                f"{bool(g.isnan().any())}, nan in want {bool(w.isnan().any())}")


@contextlib.contextmanager
def _dynamo_limits():
    import torch._dynamo.config as cfg

    old = cfg.recompile_limit, cfg.accumulated_recompile_limit
    cfg.recompile_limit, cfg.accumulated_recompile_limit = 64, 4096
    try:
        yield
    finally:
        cfg.recompile_limit, cfg.accumulated_recompile_limit = old


def rings() -> list[Any]:
    import fxslots

    return [g.ring for g in fxslots.regions()]


def pending_slots() -> int:
    return sum(r.pending() for r in rings())


def check_case(case: Case, device: str = "cpu", *, exact: bool | None = None,
               rtol: float = 1e-5, atol: float = 1e-5) -> None:
    """Compile ``case``'s model with fxslots and with aot_eager, run every schedule, compare.

    ``exact``: bitwise against aot_eager (default: on CPU)."""
    import torch._inductor.config as inductor_config

    import fxslots

    if exact is None:
        exact = torch.device(device).type == "cpu"
    opts = dict(case.options)
    opts["slots"] = case.slots
    assert case.max_in_flight() <= case.slots, case
    reference = ("aot_eager_default_partitioner" if opts.get("partitioner") == "default"
                 else "aot_eager")

    fxslots.reset()
    base = FuzzModel(case.ops, case.mutate_input, case.two_outputs, case.seed).to(device)
    sut, ref, eager = copy.deepcopy(base), copy.deepcopy(base), copy.deepcopy(base)
    # Inductor draws its own random numbers unless told to call ATen's; aot_eager is the bar.
    with _dynamo_limits(), inductor_config.patch(fallback_random=True), \
            fxslots.report.recording() as records, \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run_and_compare(case, device, opts, reference, exact, rtol, atol, sut, ref, eager)
    assert_slots_used(case, records, [str(w.message) for w in caught])


def may_fall_back(case: Case) -> bool:
    """Whether a graph of ``case`` may run without slots: none may. (strided_slice's saved
    ``h[:, ::2]`` used to fall back under dynamic shapes and at odd T: its disjointness was
    judged by stride x size, not by its span.)"""
    return False


def assert_slots_used(case: Case, records: list[Any], warned: list[str]) -> None:
    """Every graph fxslots compiled for ``case`` applied its plan and took slots: a backend
    that silently ran everything without slots would otherwise pass every comparison."""
    import fxslots

    assert records, "fxslots compiled nothing"
    fallbacks = [r.fallback for r in records if r.fallback is not None]
    if may_fall_back(case):
        assert all("overlaps itself" in f for f in fallbacks), fallbacks
    else:
        assert not fallbacks, f"graphs ran without slots: {fallbacks}"
    assert fxslots.counters["fallbacks"] == len(fallbacks)
    # Under kernels="inductor" a graph Inductor fails on runs its ATen kernels, with a warning
    # (still in slots): Inductor 2.11's Triton codegen fails on a few dynamic backwards.
    ours = [w for w in warned if w.startswith("fxslots")
            and not w.startswith("fxslots: Inductor could not compile")]
    assert len(ours) == len(fallbacks) and all("runs without slots" in w for w in ours), ours
    for r in records:
        if r.fallback is not None:
            continue
        assert r.plan is not None and r.variant is not None, r
        if r.plan.views or r.plan.staging:
            assert any(s.microbatch is not None for s in r.variant.ring.slots), (
                f"{r.variant.name} has a plan with {len(r.plan.views)} slot views but its "
                f"ring never handed out a slot")


def _run_and_compare(case, device, opts, reference, exact, rtol, atol, sut, ref, eager):
    """Run every schedule of ``case`` on fxslots, the reference and eager; compare."""
    c_sut = torch.compile(sut, backend="fxslots", options=opts, dynamic=case.dynamic)
    c_ref = torch.compile(ref, backend=reference, dynamic=case.dynamic)

    def ring_check(in_flight: int) -> None:
        n = pending_slots()
        assert n <= in_flight, f"{n} slots pending with {in_flight} microbatches in flight"
        for r in rings():
            assert len(r.slots) in (0, case.slots), (len(r.slots), case.slots)

    for si in range(len(case.schedules)):
        got = run_schedule(c_sut, sut, case, si, device, ring_check)
        assert pending_slots() == 0, (
            f"schedule {si}: {pending_slots()} slots still pending after every microbatch "
            f"ended")
        want = run_schedule(c_ref, ref, case, si, device)
        compare(got, want, exact=exact, rtol=rtol, atol=atol,
                what=f"schedule {si}: fxslots vs {reference}")
        plain = run_schedule(eager, eager, case, si, device)
        compare(got, plain, exact=False, rtol=rtol, atol=atol,
                what=f"schedule {si}: fxslots vs eager")
