"""``options={"kernels": "inductor"}`` (issue 13): Inductor compiles the rewritten graphs and its
kernels write the saved values into the slot views.

What is compared on CPU: outputs and gradients against ``torch.compile``'s default backend
(``backend="inductor"``: the same decompositions, joint passes, partitioner and code generator,
so the same C++ kernels wherever the slot writes leave a kernel's shape alone: bitwise), and
against eager (a tolerance: fused kernels round differently). The slot writes themselves are
checked in Inductor's generated code, which the plan's copy-free figure is read from.
"""

from __future__ import annotations

import copy
import logging
import re
import warnings

import pytest
import torch
from torch import nn

import fxslots
from examples.models import MLP, Attention
from fxslots.passes.audit import slot_writes
from fxslots.schemas import Write
from tests.helpers import assert_same, run, schedule_1f1b, schedule_ffbb, with_caps
from tests.zoo import ConvNet
from tests.test_graph_executor_cpu import _StandInGraph, stand_in_graphs  # noqa: F401

INDUCTOR = {"kernels": "inductor", "slots": 2}


def _schedule():
    """Two shape variants, two microbatches in flight each (FFBB, then 1F1B)."""
    return schedule_ffbb(2) + [(op, i + 2) for op, i in schedule_1f1b(2, 2)]


class _Embed(nn.Module):
    """A token embedding feeding a matmul: ``embedding`` saved for nothing, its output saved
    for the Linear's weight gradient (the expansion to ``index_select.out`` writes it)."""

    def __init__(self):
        super().__init__()
        self.emb, self.lin = nn.Embedding(50, 16), nn.Linear(16, 16)

    def forward(self, tokens):
        return torch.tanh(self.lin(self.emb(tokens)))


def _model(name):
    torch.manual_seed(0)
    if name == "convbn":  # a backward found no slot holding its saved tensors: Inductor's
        # layout optimization ran the convolutions channels-last, not the slots' layout
        return ConvNet(), [torch.randn(2, 3, s, s) for s in (16, 16, 20, 20)]
    if name == "embedding":  # H200 run 15: Inductor refused the expansion's index_select.out
        return _Embed(), [torch.randint(0, 50, (2, s)) for s in (4, 4, 6, 6)]
    if name == "mlp-bf16":  # GELU's bf16 -> fp32 -> bf16 casts: a value the plan copies
        return MLP(16, 32, 3).bfloat16(), [torch.randn(s, 16).bfloat16() for s in (4, 4, 6, 6)]
    if name == "mlp":
        return MLP(16, 32, 3), [torch.randn(s, 16) for s in (4, 4, 6, 6)]
    return Attention(16, 2), [torch.randn(2, s, 16) for s in (4, 4, 6, 6)]


def _code_of(caplog, what="the forward graph"):
    """The output code Inductor generated for ``what``, from the DEBUG log."""
    found = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith(f"Inductor's code for {what}")]
    assert found, f"no Inductor code logged for {what}"
    return found[0]


def test_kernels_option_is_validated():
    assert fxslots.Options().kernels == "aten"
    assert fxslots.Options.parse({"kernels": "inductor"}).kernels == "inductor"
    with pytest.raises(fxslots.OptionsError, match="'aten' or 'inductor'"):
        fxslots.Options.parse({"kernels": "triton"})


@pytest.mark.parametrize("name,dynamic", [("mlp", False), ("mlp", True), ("attention", None),
                                          ("embedding", None), ("mlp-bf16", None),
                                          ("convbn", None)])
def test_matches_torch_compile_default_bitwise(name, dynamic):
    model, xs = _model(name)
    sched = _schedule()
    ours = run(model, "fxslots", xs, sched, steps=2, set_to_none=False, dynamic=dynamic,
               options=INDUCTOR)
    assert fxslots.counters["inductor_fallbacks"] == 0
    if name != "convbn":  # torch.compile's default runs the convolutions channels-last
        assert_same(ours, run(model, "inductor", xs, sched, steps=2, set_to_none=False,
                              dynamic=dynamic))
    tol = 2e-2 if name.endswith("bf16") else 1e-5  # fused kernels round bf16 once, eager often
    assert_same(ours, run(model, "eager", xs, sched, steps=2, set_to_none=False), exact=False,
                atol=tol, rtol=max(tol, 1e-4))


def test_a_value_the_plan_copies_is_stored_from_its_kernel(caplog):
    """In bf16 Inductor's GELU ends in a cast to bf16, which has no out= form, so the plan
    copies it into its slot. Its reader (the next matmul) then reads the slot, and the GELU
    kernel stores its value there and nowhere else: no copy, and the audit reads bf16 C++
    kernels' parameters (``at::BFloat16* out_ptr0``) right. (Before: 50% copy-free, as on the
    H200 in run 15's launch-bound MLP, 51%.)"""
    torch.manual_seed(0)
    with caplog.at_level(logging.DEBUG, logger="fxslots.kernels"):
        report = fxslots.explain(MLP(16, 32, 3).bfloat16(), torch.randn(4, 16).bfloat16(),
                                 **INDUCTOR)
    (g,) = report.graphs
    assert g.plan.copied_bytes == 0 and g.plan.copy_free_bytes == g.plan.slot_bytes > 0
    assert len(g.kernels) == 4 and all("in place" in f for f in g.kernels), g.kernels
    gelu = [line for line in _code_of(caplog).splitlines()
            if line.strip().startswith("cpp_fused_gelu") and "(slot_" in line]
    assert len(gelu) == 2 and all(line.count(",") == 1 for line in gelu), gelu  # in, slot


def test_kernels_write_saved_values_into_the_slots(caplog):
    """Matmuls write their slot through ``fxslots::addmm_out_into``; the GELU kernel reads that
    slot after it and stores its own result into the next slot: no copy kernel at all."""
    torch.manual_seed(0)
    with caplog.at_level(logging.DEBUG, logger="fxslots.kernels"):
        report = fxslots.explain(MLP(16, 32, 3), torch.randn(4, 16), **INDUCTOR)
    (g,) = report.graphs
    assert "aten.addmm.out(" in g.forward_after  # explain shows the graph before Inductor
    assert g.plan.copied_bytes == 0 and g.plan.copy_free_bytes == g.plan.slot_bytes > 0
    lines = _code_of(caplog).splitlines()
    calls = [i for i, line in enumerate(lines) if "fxslots.addmm_out_into" in line]
    assert [lines[i].split("out=")[1].rstrip(")") for i in calls] == ["slot_addmm",
                                                                    "slot_addmm_1"]
    gelu = [i for i, line in enumerate(lines) if "cpp_fused_gelu" in line and "(slot_" in line]
    assert len(gelu) == 2 and calls[0] < gelu[0] < calls[1] < gelu[1]  # each read after write
    assert "slot_addmm, slot_mul_2)" in lines[gelu[0]]
    assert not any("copy" in line for line in lines if line.lstrip().startswith("cpp_fused"))
    assert all("in place" in f for f in g.kernels), g.kernels
    assert "Inductor's slot writes" in str(report)


class _SavesItsOutput(nn.Module):
    """``y`` is a user output and saved for ``sin``'s backward: its slot needs a copy."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 32, bias=False)

    def forward(self, x):
        y = self.lin(x)
        return y, y.sin()


def test_a_copy_inductor_makes_counts_as_a_copy(caplog):
    torch.manual_seed(0)
    with caplog.at_level(logging.DEBUG, logger="fxslots.kernels"):
        report = fxslots.explain(_SavesItsOutput(), torch.randn(4, 16), **INDUCTOR)
    (g,) = report.graphs
    (p,) = [p for p in g.plan.placements if p.views]
    assert p.write is Write.COPY and g.plan.copied_bytes == p.nbytes
    assert "copies it from buf" in p.reason or "also stores it into buf" in p.reason, p.reason
    assert "slot_" in _code_of(caplog)


def test_audit_reads_triton_kernels():
    """The GPU's code: a Triton kernel storing an extern matmul's result unchanged (a copy), a
    value it computed (in place), and a value it also stores into its own buffer (a copy)."""
    code = """
triton_poi_fused_gelu_0 = async_compile.triton('triton_poi_fused_gelu_0', '''
import triton
@triton.jit
def triton_poi_fused_gelu_0(in_ptr0, out_ptr0, out_ptr1, out_ptr2, xnumel, XBLOCK : tl.constexpr):
    xnumel = 128
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (x0), xmask).to(tl.float32)
    tmp1 = 0.5
    tmp2 = tmp0 * tmp1
    tmp3 = tmp2 + tmp1
    tl.store(out_ptr0 + (tl.broadcast_to(x0, [XBLOCK])), tmp0, xmask)
    tl.store(out_ptr1 + (x0), tmp2, xmask)
    tl.store(out_ptr2 + (x0), tmp3, xmask)
''', device_str='cuda')

async_compile.wait(globals())

def call(args):
    primals_1, slot_mm, slot_gelu, slot_other, slot_lin = args
    args.clear()
    buf0 = empty_strided_cuda((4, 32), (32, 1), torch.bfloat16)
    extern_kernels.mm(primals_1, primals_1, out=buf0)
    torch.ops.fxslots.mm_out_into.default(primals_1, primals_1, out=slot_lin)
    buf1 = empty_strided_cuda((4, 32), (32, 1), torch.bfloat16)
    stream0 = get_raw_stream(0)
    triton_poi_fused_gelu_0.run(buf0, slot_mm, slot_gelu, buf1, 128, stream=stream0)
    return (buf1, slot_mm, slot_gelu, slot_lin, )
"""
    slots = {"slot_mm", "slot_gelu", "slot_other", "slot_lin"}
    writes = slot_writes(code, slots | {"primals_1"}, slots)
    assert writes["slot_mm"] == ["triton_poi_fused_gelu_0 copies it from buf0"]
    assert writes["slot_gelu"] == ["in place: triton_poi_fused_gelu_0 computes it into the slot"]
    assert writes["slot_lin"] == ["in place: fxslots.mm_out_into.default writes it"]
    assert "slot_other" not in writes
    twice = code.replace("tl.store(out_ptr2 + (x0), tmp3", "tl.store(out_ptr2 + (x0), tmp2")
    assert slot_writes(twice, slots | {"primals_1"}, slots)["slot_gelu"] == [
        "triton_poi_fused_gelu_0 also stores it into buf1"]


@pytest.mark.parametrize("join_every", [None, 1.0], ids=["own-joins", "joins-merged"])
def test_side_stream_copies_survive_inductor(caplog, monkeypatch, join_every):
    """Offload's copies and joins (forward) and reloads and joins (backward) are operators in
    Inductor's code, each join after its copy and before the first reader. Joins merged into
    one wait become a join each again (Inductor keeps no order between them)."""
    if join_every is not None:
        with_caps(monkeypatch, join_every=join_every)
    model, xs = _model("mlp")
    sched = _schedule()
    options = {**INDUCTOR, "offload": "all"}
    with caplog.at_level(logging.DEBUG, logger="fxslots.kernels"):
        ours = run(model, "fxslots", xs, sched, steps=2, set_to_none=False, options=options)
    fw = _code_of(caplog).splitlines()
    if join_every is not None:  # the graph Inductor compiles says each join waits itself
        lowered = [r.getMessage() for r in caplog.records
                   if r.getMessage().startswith("the graph Inductor compiles for the forward")]
        assert any("under Inductor every join waits" in g for g in lowered)
        assert not any("joined by the" in g for g in lowered)
    starts = [i for i, line in enumerate(fw) if "fxslots.offload_start.default(" in line]
    joins = [i for i, line in enumerate(fw) if "fxslots.offload_join.default(" in line]
    assert starts and len(starts) == len(joins) and all(
        s < j for s, j in zip(starts, joins, strict=True))
    bw = _code_of(caplog, "the backward graph").splitlines()
    reloads = [i for i, line in enumerate(bw) if "fxslots.reload.default(" in line]
    assert reloads
    for r in reloads:  # bufN = reload(...); bufM = bufN[0]; ...; reload_join([bufM]); readers
        member = next(line.split("=")[0].strip() for line in bw[r:]
                      if line.strip().endswith(f"{bw[r].split('=')[0].strip()}[0]"))
        skip = (f"{member} =", "assert_size_stride", "assert_tensor_metadata", "del ", "#")
        uses = [i for i, line in enumerate(bw) if i > r and re.search(rf"\b{member}\b", line)
                and not line.strip().startswith(skip)]
        join = next(i for i in uses if "reload_join" in bw[i])
        assert all(i > join for i in uses if "reload_join" not in bw[i]), bw[r:join + 1]
    offloaded = [p for r in fxslots.regions() for v in r.live_variants()
                 for p in v.plan.placements if p.write is Write.OFFLOAD]
    assert offloaded
    assert_same(ours, run(model, "inductor", xs, sched, steps=2, set_to_none=False))


class _SavedTwice(nn.Module):
    """The default partitioner saves the softmax and an ``expand`` of it: one offloaded group
    with two members that share bytes."""

    def forward(self, x):
        a = (x @ x.transpose(-2, -1)) * 0.5
        return a.softmax(dim=-1) @ x


def test_members_of_one_reloaded_group_alias_in_inductors_code(caplog):
    """Inductor takes every tensor an operator returns for a buffer of its own: two members of
    one group returned apart let it reuse one's bytes while the other is still read (wrong input
    gradients on the H200, fuzz case 20). They come back as views of one reloaded span."""
    xs = [torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    options = {"kernels": "inductor", "partitioner": "default", "offload": "above:64"}
    with caplog.at_level(logging.DEBUG, logger="fxslots.kernels"):
        c = torch.compile(_SavedTwice(), backend="fxslots", options=options, dynamic=False)
        for x in xs:
            got, want = x.clone().requires_grad_(), x.clone().requires_grad_()
            c(got).sum().backward()
            _SavedTwice()(want).sum().backward()
            torch.testing.assert_close(got.grad, want.grad)
    bw = _code_of(caplog, "the backward graph")
    span = re.search(r"(buf\d+) = torch\.ops\.fxslots\.reload_span\.default\(\[(\w+), (\w+)\]", bw)
    assert span, bw
    assert "fxslots.reload.default([" + span.group(2) not in bw
    assert "reload_join" in bw[span.end():], bw


class _SplitHeads(nn.Module):
    """nanoGPT's ``q, k, v = c_attn(x).split(n_embd, dim=2)``: the three saved views start at
    offsets 0, 16 and 32 of one storage."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x):
        q, k, v = self.qkv(x).split(16, -1)
        return (q @ k.transpose(-1, -2)).softmax(-1) @ v


@pytest.mark.parametrize("partitioner", ["min_cut", "default"])
def test_an_offloaded_group_of_split_views_reloads_under_inductor(partitioner):
    """Found by review (session 45): the reloaded span's size was read off the members'
    storage offsets, which Inductor lays out at 0 for every input of its graph: 352 elements
    where the span holds 384, and Inductor's size check stopped the first backward. The span's
    length is fixed when the graph is lowered; gradients are Inductor's own."""
    torch.manual_seed(0)
    ours, ref = _SplitHeads(), _SplitHeads()
    ref.load_state_dict(ours.state_dict())
    c = torch.compile(ours, backend="fxslots", options={
        "kernels": "inductor", "offload": "all", "partitioner": partitioner})
    r = torch.compile(ref)
    for step in range(2):
        x = torch.randn(2, 4, 16, generator=torch.Generator().manual_seed(step))
        c(x).square().sum().backward()
        r(x).square().sum().backward()
        for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
    assert fxslots.counters["inductor_fallbacks"] == 0 and fxslots.counters["fallbacks"] == 0


def test_graph_executor_replays_inductor_code(stand_in_graphs):  # noqa: F811
    """The CUDA-graph executor's bookkeeping with Inductor's code as the captured callable
    (on CPU, with the stand-in graph of test_graph_executor_cpu.py)."""
    model, xs = _model("attention")
    sched = _schedule()
    ours = run(model, "fxslots", xs, sched, steps=3, set_to_none=False,
               options={**INDUCTOR, "offload": "above:600"})
    assert fxslots.counters["captures"] > 0 and _StandInGraph.replays > 0
    assert fxslots.counters["inductor_fallbacks"] == 0
    assert_same(ours, run(model, "inductor", xs, sched, steps=3, set_to_none=False))


def test_inference_graphs_are_compiled_too(caplog):
    model, xs = _model("mlp")
    f = torch.compile(copy.deepcopy(model), backend="fxslots", options=INDUCTOR)
    with caplog.at_level(logging.DEBUG, logger="fxslots.kernels"), torch.no_grad():
        got = f(xs[0])
    assert "Inductor's code for an inference graph" in caplog.text
    torch.testing.assert_close(got, model(xs[0]), atol=1e-5, rtol=1e-5)


class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return torch.tanh(self.lin(x) * 1.23456789)  # a kernel no other test compiled


def test_a_graph_inductor_cannot_compile_runs_its_aten_graph():
    """No C++ compiler: every graph falls back, named, with its cause; training goes on."""
    import torch._inductor.config as inductor_config
    from torch._inductor.cpu_vec_isa import valid_vec_isa_list

    valid_vec_isa_list()  # probed with the real compiler now (cached), not the missing one
    torch.manual_seed(0)
    eager, model = _Scaled(), _Scaled()
    model.load_state_dict(eager.state_dict())
    xs = [torch.randn(4, 8) for _ in range(2)]
    patch = {"cpp.cxx": ("/nonexistent/c++",), "fx_graph_cache": False}
    with inductor_config.patch(patch), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f = torch.compile(model, backend="fxslots", options=INDUCTOR)
        for x in xs:
            f(x).sum().backward()
            eager(x).sum().backward()
    messages = [str(w.message) for w in caught if "Inductor could not" in str(w.message)]
    assert any("the forward graph of v0" in m and "ATen kernels" in m for m in messages)
    assert any("the backward graph of v0" in m for m in messages)
    for a, b in zip(eager.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-6, rtol=1e-5)

    fxslots.reset()
    strict = torch.compile(copy.deepcopy(model), backend="fxslots",
                           options={**INDUCTOR, "strict": True})
    with inductor_config.patch(patch), pytest.raises(Exception, match="strict=True") as err:
        strict(xs[0])
    assert "Inductor could not compile" in str(err.value)


# ---------------------------------------------------------------- on the GPU (unrun on CPU CI)


def _llama_steps(options, steps=2):
    """Llama-tiny in bf16, two sequence lengths, FFBB and 1F1B with two microbatches each;
    gradients compared with eager's after every schedule. Returns the variants' plans."""
    from examples.llama import batch, llama

    torch.manual_seed(0)
    eager = llama("llama-tiny").cuda().bfloat16()
    ours = copy.deepcopy(eager)
    f = torch.compile(ours, backend="fxslots", options={"slots": 2, **options})
    g = torch.Generator().manual_seed(1)
    data = {s: [tuple(t.cuda() for t in batch(eager.cfg, 2, s, generator=g)) for _ in range(4)]
            for s in (32, 64)}
    for _ in range(steps):
        for mbs in data.values():
            for sched in (schedule_ffbb(2), schedule_1f1b(4, 2)):
                for fn in (eager, f):
                    pending = {}
                    for op, i in sched:
                        if op == "F":
                            pending[i] = fn(*mbs[i])
                        else:
                            pending.pop(i).backward()
                for a, b in zip(eager.parameters(), ours.parameters(), strict=True):
                    torch.testing.assert_close(b.grad, a.grad, atol=2e-2, rtol=2e-2)
                eager.zero_grad(set_to_none=True)
                ours.zero_grad(set_to_none=True)
    # The compiled model goes back too: the caller keeps it (and so its arenas) alive.
    return [v.plan for r in fxslots.regions() for v in r.live_variants()], f


def _copy_free_fraction(plans):
    free = sum(int(p.copy_free_bytes) for p in plans if p.slot_bytes.is_Integer)
    total = sum(int(p.slot_bytes) for p in plans if p.slot_bytes.is_Integer)
    return free / total


@pytest.mark.cuda
def test_cuda_inductor_matches_eager_in_bf16():
    _, _f = _llama_steps({"kernels": "inductor"})  # gradients checked inside, every schedule
    assert fxslots.counters["captures"] > 0 and fxslots.counters["inductor_fallbacks"] == 0


@pytest.mark.cuda
def test_cuda_inductor_is_as_copy_free_as_aten():
    """Expected to fail in H200 runs 14-15 (93.07% copy-free against ATen's 93.45% on
    llama-tiny); it passed as an unexpected success in runs 42d (H200) and 45a (H100), so it
    is a plain test again."""
    inductor = _copy_free_fraction(_llama_steps({"kernels": "inductor"}, steps=1)[0])
    fxslots.reset()
    aten = _copy_free_fraction(_llama_steps({"kernels": "aten"}, steps=1)[0])
    assert inductor >= aten, (inductor, aten)


@pytest.mark.cuda
def test_cuda_inductor_offload_is_captured():
    plans, _f = _llama_steps({"kernels": "inductor", "offload": "all"})
    assert any(p.write is Write.OFFLOAD for plan in plans for p in plan.placements)
    hosts = [s.host_arena for r in fxslots.regions() for s in r.ring.slots
             if s.host_arena is not None]
    assert hosts and all(h.is_pinned() for h in hosts)
    assert fxslots.counters["captures"] > 0 and fxslots.counters["inductor_fallbacks"] == 0


@pytest.mark.cuda
def test_cuda_inductor_dropout_masks_are_fresh_and_backward_uses_them():
    """With kernels="inductor" dropout draws from Inductor's own RNG inside the captured graph:
    each replay must draw a new mask (the generator's graph-safe offsets), and the backward
    must use the mask its forward drew. Checked against the forward's own output: y = h * mask
    * 2, so dx = (g * mask * 2) @ W wherever h is not exactly 0."""
    torch.manual_seed(0)
    lin = nn.Linear(64, 64).cuda()

    def f(x):
        return torch.nn.functional.dropout(lin(x), p=0.5, training=True)

    c = torch.compile(f, backend="fxslots", options={"kernels": "inductor"}, dynamic=False)
    masks = []
    for _ in range(6):  # warm-up, capture, replays
        x = torch.randn(32, 64, device="cuda", requires_grad=True)
        y = c(x)
        g = torch.randn_like(y)
        y.backward(g)
        mask = y != 0
        h = lin(x).detach()
        torch.testing.assert_close(y.detach(), h * mask * 2.0, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(x.grad, (g * mask * 2.0) @ lin.weight.detach(),
                                   rtol=1e-4, atol=1e-4)
        masks.append(mask)
    assert fxslots.counters["captures"] > 0
    assert all(not torch.equal(a, b) for a, b in zip(masks, masks[1:])), "a mask repeated"


def test_inductor_keeps_the_offload_joins_where_the_plan_put_them(caplog, monkeypatch):
    """The plan joins each device-to-host copy where it expects the copy done: with a slow
    link, after the forward's last kernel. Inductor's memory-driven reordering hoisted each
    join to its copy's start (the join is the copied value's last reader, so that frees it
    soonest), and the compute stream waited for every copy: offload="auto" under Inductor
    took 1.25x (llama-small) and 1.70x (heavy) no offload's step (H100 run 52a). Graphs with
    side-stream copies are compiled without it."""
    with_caps(monkeypatch, link=1e6)
    model, xs = _model("mlp")
    options = {**INDUCTOR, "offload": "all"}
    with caplog.at_level(logging.DEBUG, logger="fxslots.kernels"):
        ours = run(model, "fxslots", xs, _schedule(), steps=1, set_to_none=False,
                   options=options)
    fw = _code_of(caplog).splitlines()
    kernels = [i for i, line in enumerate(fw)
               if re.search(r"cpp_fused_\w*\(|extern_kernels\.|fxslots\.\w+_into\.", line)]
    starts = [i for i, line in enumerate(fw) if "fxslots.offload_start.default(" in line]
    joins = [i for i, line in enumerate(fw) if "fxslots.offload_join.default(" in line]
    assert len(starts) == len(joins) >= 2 and kernels
    assert min(joins) > max(kernels), "\n".join(fw)
    assert_same(ours, run(model, "inductor", xs, _schedule(), steps=1, set_to_none=False))
