"""Golden tests: the rewritten graphs and the plan, pinned, each with a numerics check.

Regenerate the snapshots with EXPECTTEST_ACCEPT=1 after an intended change, and read the diff.
"""

from __future__ import annotations

import copy
import re

import sympy
import torch
from expecttest import assert_expected_inline

import fxslots
from fxslots.report import recording
from examples.models import MLP, Attention, SplitViews as Aliasing
from tests.helpers import assert_same, run, schedule_ffbb, with_caps


def check_numerics(model, inputs, dynamic=None, **options):
    """Two microbatches in flight: bitwise equal to aot_eager, within 1e-5 of eager."""
    sched = schedule_ffbb(len(inputs))
    opts = {"slots": len(inputs), **options}
    ours = run(model, "fxslots", inputs, sched, dynamic=dynamic, options=opts)
    ref = run(model, "aot_eager", inputs, sched, dynamic=dynamic)
    assert_same(ours, ref, exact=True)
    assert_same(ours, run(model, "eager", inputs, sched), exact=False)


def explain(model, x, **kw):
    """The report, after checking that every offset it prints is where the runtime puts it."""
    report = str(fxslots.explain(model, x, **kw))
    assert_offsets_are_the_runtime_views(model, x, report, **kw)
    return report


# The backward's placeholders that arrive as slot views: "read from slot: group 2 at byte 0",
# "in the host arena, reloaded ahead of use: group 2 at host byte 0".
_ANNOTATION = re.compile(r"^    (\w+): .*# (?:read from slot|in the host arena, [\w ]+): group \d+ "
                         r"at (?:host )?byte (.+)$", re.M)


def assert_offsets_are_the_runtime_views(model, x, report, dynamic=None, **options):
    """The report's offsets are computed from plan fields. Check each against the tensor the
    runtime built: compile the model again, run a forward, and read its saved tensors from the
    autograd node (what the backward will read), as byte offsets into their slot's arenas."""
    fxslots.reset()
    c = torch.compile(copy.deepcopy(model), backend="fxslots",
                      options={**options, "slots": 1}, dynamic=dynamic)
    with recording() as records:
        c(x.clone()).sum().backward()  # compiles the backward too
        out = c(x.clone())
    (record,) = records
    saved = _saved_tensors(out)
    assert len(saved) == len(record.saved.tensors), (len(saved), record.saved.tensors)
    (layout,) = record.variant.layouts.values()  # one shape ran: its symbols' values
    env = {sympy.Symbol(k): v for k, v in layout.key}
    printed = {name: int(sympy.sympify(e).subs(env)) for name, e in _ANNOTATION.findall(report)}
    (slot,) = [s for g in fxslots.regions() for s in g.ring.slots if s.pending()]
    actual = {}
    for meta, t in zip(record.saved.tensors, saved, strict=True):
        base = t.untyped_storage().data_ptr()
        if any(a is not None and base == a.data_ptr() for a in (slot.arena, slot.host_arena)):
            actual[meta.name] = t.storage_offset() * t.element_size()
    assert printed == actual, f"printed {printed}, built {actual}"
    out.sum().backward()
    fxslots.reset()


def without_backward_body(report: str) -> str:
    """The report without the backward graph's body (its placeholders stay)."""
    head, rest = report.split("----- backward -----\n")
    signature, body = rest.split("):\n", 1)
    return head + "----- backward -----\n" + signature + "):\n    ...\n" + body[
        body.index("----- plan -----"):]


def _saved_tensors(out):
    """What AOTAutograd saved for ``out``'s backward, in the forward graph's output order."""
    todo, seen = [out.grad_fn], set()
    while todo:
        node = todo.pop()
        if type(node).__name__.startswith("CompiledFunctionBackward"):
            return (*node.saved_tensors, *getattr(node, "_tensors_no_vc_check", ()))
        seen.add(node)
        todo += [n for n, _ in node.next_functions if n is not None and n not in seen]
    raise AssertionError("no compiled autograd node behind the output")


class InPlaceInput(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        x.mul_(2)  # mutates the caller's tensor, as eager does
        return self.lin(x).tanh()


def test_mlp():
    torch.manual_seed(0)
    model = MLP(16, 32, 2)
    check_numerics(model, [torch.randn(4, 16), torch.randn(4, 16)])
    assert_expected_inline(explain(model, torch.randn(4, 16), slots=2), """\
===== graph 0 (v0 of region 0) =====
----- forward (rewritten) -----
def forward(
    primals_1: f32[32, 16],
    primals_2: f32[32],
    primals_3: f32[4, 16],
    primals_4: f32[16, 32],
    primals_5: f32[16],
    slot_addmm: f32[4, 32] @ slot byte 0,
    slot_gelu: f32[4, 32] @ slot byte 512,
):
    t: f32[16, 32] = aten.t(primals_1)
    addmm: f32[4, 32] = aten.addmm.out(primals_2, primals_3, t, out=slot_addmm)  # copy-free: slot bytes [0, 512) hold group 1
    gelu: f32[4, 32] = aten.gelu.out(addmm, out=slot_gelu)  # copy-free: slot bytes [512, 1024) hold group 2
    t_1: f32[32, 16] = aten.t(primals_4)
    addmm_1: f32[4, 16] = aten.addmm(primals_5, gelu, t_1)
    return [addmm_1, primals_3, addmm, gelu, t_1]
----- backward -----
def backward(
    primals_3: f32[4, 16],
    addmm: f32[4, 32],  # read from slot: group 1 at byte 0
    gelu: f32[4, 32],  # read from slot: group 2 at byte 512
    t_1: f32[32, 16],
    tangents_1: f32[4, 16],
):
    t_2: f32[16, 32] = aten.t(t_1)
    mm: f32[4, 32] = aten.mm(tangents_1, t_2)
    t_3: f32[16, 4] = aten.t(tangents_1)
    mm_1: f32[16, 32] = aten.mm(t_3, gelu)
    t_4: f32[32, 16] = aten.t(mm_1)
    sum_1: f32[1, 16] = aten.sum.dim_IntList(tangents_1, [0], True)
    view: f32[16] = aten.view(sum_1, [16])
    t_5: f32[16, 32] = aten.t(t_4)
    gelu_backward: f32[4, 32] = aten.gelu_backward(mm, addmm)
    t_6: f32[32, 4] = aten.t(gelu_backward)
    mm_2: f32[32, 16] = aten.mm(t_6, primals_3)
    t_7: f32[16, 32] = aten.t(mm_2)
    sum_2: f32[1, 32] = aten.sum.dim_IntList(gelu_backward, [0], True)
    view_1: f32[32] = aten.view(sum_2, [32])
    t_8: f32[32, 16] = aten.t(t_7)
    return [t_8, view_1, None, t_5, view]
----- plan -----
tensor     shape        stride   bytes  group  offset  write
---------  -----------  -------  -----  -----  ------  ---------
primals_3  f32[4, 16]   [16, 1]  256    g0     -       no slot
addmm      f32[4, 32]   [32, 1]  512    g1     0       copy-free
gelu       f32[4, 32]   [32, 1]  512    g2     512     copy-free
t_1        f32[32, 16]  [1, 32]  2048   g3     -       no slot

groups:
  g0: no slot   offset 0, 256 bytes  (user input: the caller owns it)
  g1: copy-free offset 0, 512 bytes  (aten::addmm.out writes it in place)
  g2: copy-free offset 512, 512 bytes  (aten::gelu.out writes it in place)
  g3: no slot   offset 0, 2048 bytes  (parameter or buffer: outlives every replay)
arena bytes per slot: 1024
saved bytes in slot: 1024, copy-free: 1024
bytes copied per forward: 0
partitioned by: default""")


def test_attention():
    torch.manual_seed(0)
    model = Attention(16, 2)
    check_numerics(model, [torch.randn(2, 8, 16), torch.randn(2, 8, 16)])
    assert_expected_inline(explain(model, torch.randn(2, 8, 16), slots=2), """\
===== graph 0 (v0 of region 0) =====
----- forward (rewritten) -----
def forward(
    primals_1: f32[2, 8, 16],
    primals_2: f32[48, 16],
    primals_3: f32[48],
    primals_4: f32[16, 16],
    primals_5: f32[16],
    slot_clone: f32[2, 2, 8, 8] @ slot byte 0,
    slot_clone_1: f32[2, 2, 8, 8] @ slot byte 1024,
    slot__softmax: f32[2, 2, 8, 8] @ slot byte 2048,
    slot_clone_2: f32[2, 2, 8, 8] @ slot byte 3072,
    slot_clone_3: f32[2, 8, 2, 8] @ slot byte 4096,
):
    view: f32[16, 16] = aten.view(primals_1, [16, 16])
    t: f32[16, 48] = aten.t(primals_2)
    addmm: f32[16, 48] = aten.addmm(primals_3, view, t)
    view_1: f32[2, 8, 48] = aten.view(addmm, [2, 8, 48])
    split = aten.split.Tensor(view_1, 16, -1)
    getitem: f32[2, 8, 16] = getitem(split, 0)
    getitem_1: f32[2, 8, 16] = getitem(split, 1)
    getitem_2: f32[2, 8, 16] = getitem(split, 2)
    view_2: f32[2, 8, 2, 8] = aten.view(getitem, [2, 8, 2, 8])
    transpose: f32[2, 2, 8, 8] = aten.transpose.int(view_2, 1, 2)
    view_3: f32[2, 8, 2, 8] = aten.view(getitem_1, [2, 8, 2, 8])
    transpose_1: f32[2, 2, 8, 8] = aten.transpose.int(view_3, 1, 2)
    view_4: f32[2, 8, 2, 8] = aten.view(getitem_2, [2, 8, 2, 8])
    transpose_2: f32[2, 2, 8, 8] = aten.transpose.int(view_4, 1, 2)
    transpose_3: f32[2, 2, 8, 8] = aten.transpose.int(transpose_1, -2, -1)
    expand: f32[2, 2, 8, 8] = aten.expand(transpose, [2, 2, 8, 8])
    clone: f32[2, 2, 8, 8] = aten.copy_(slot_clone, expand)  # copy-free: slot bytes [0, 1024) hold group 1
    _unsafe_view: f32[4, 8, 8] = aten._unsafe_view(clone, [4, 8, 8])
    expand_1: f32[2, 2, 8, 8] = aten.expand(transpose_3, [2, 2, 8, 8])
    clone_1: f32[2, 2, 8, 8] = aten.copy_(slot_clone_1, expand_1)  # copy-free: slot bytes [1024, 2048) hold group 2
    _unsafe_view_1: f32[4, 8, 8] = aten._unsafe_view(clone_1, [4, 8, 8])
    bmm: f32[4, 8, 8] = aten.bmm(_unsafe_view, _unsafe_view_1)
    view_5: f32[2, 2, 8, 8] = aten.view(bmm, [2, 2, 8, 8])
    mul: f32[2, 2, 8, 8] = aten.mul.Tensor(view_5, 0.35355339059327373)
    _softmax: f32[2, 2, 8, 8] = aten._softmax.out(mul, -1, False, out=slot__softmax)  # copy-free: slot bytes [2048, 3072) hold group 3
    detach: f32[2, 2, 8, 8] = aten.detach(_softmax)
    expand_2: f32[2, 2, 8, 8] = aten.expand(_softmax, [2, 2, 8, 8])
    view_6: f32[4, 8, 8] = aten.view(expand_2, [4, 8, 8])
    expand_3: f32[2, 2, 8, 8] = aten.expand(transpose_2, [2, 2, 8, 8])
    clone_2: f32[2, 2, 8, 8] = aten.copy_(slot_clone_2, expand_3)  # copy-free: slot bytes [3072, 4096) hold group 4
    _unsafe_view_2: f32[4, 8, 8] = aten._unsafe_view(clone_2, [4, 8, 8])
    bmm_1: f32[4, 8, 8] = aten.bmm(view_6, _unsafe_view_2)
    view_7: f32[2, 2, 8, 8] = aten.view(bmm_1, [2, 2, 8, 8])
    transpose_4: f32[2, 8, 2, 8] = aten.transpose.int(view_7, 1, 2)
    clone_3: f32[2, 8, 2, 8] = aten.copy_(slot_clone_3, transpose_4)  # copy-free: slot bytes [4096, 5120) hold group 5
    _unsafe_view_3: f32[2, 8, 16] = aten._unsafe_view(clone_3, [2, 8, 16])
    view_8: f32[16, 16] = aten.view(_unsafe_view_3, [16, 16])
    t_1: f32[16, 16] = aten.t(primals_4)
    addmm_1: f32[16, 16] = aten.addmm(primals_5, view_8, t_1)
    view_9: f32[2, 8, 16] = aten.view(addmm_1, [2, 8, 16])
    return [view_9, view, _unsafe_view, _unsafe_view_1, detach, view_6, _unsafe_view_2, view_8, t_1]
----- backward -----
def backward(
    view: f32[16, 16],
    _unsafe_view: f32[4, 8, 8],  # read from slot: group 1 at byte 0
    _unsafe_view_1: f32[4, 8, 8],  # read from slot: group 2 at byte 1024
    detach: f32[2, 2, 8, 8],  # read from slot: group 3 at byte 2048
    view_6: f32[4, 8, 8],  # read from slot: group 3 at byte 2048
    _unsafe_view_2: f32[4, 8, 8],  # read from slot: group 4 at byte 3072
    view_8: f32[16, 16],  # read from slot: group 5 at byte 4096
    t_1: f32[16, 16],
    tangents_1: f32[2, 8, 16],
):
    view_10: f32[16, 16] = aten.view(tangents_1, [16, 16])
    t_2: f32[16, 16] = aten.t(t_1)
    mm: f32[16, 16] = aten.mm(view_10, t_2)
    t_3: f32[16, 16] = aten.t(view_10)
    mm_1: f32[16, 16] = aten.mm(t_3, view_8)
    t_4: f32[16, 16] = aten.t(mm_1)
    sum_1: f32[1, 16] = aten.sum.dim_IntList(view_10, [0], True)
    view_11: f32[16] = aten.view(sum_1, [16])
    t_5: f32[16, 16] = aten.t(t_4)
    view_12: f32[2, 8, 16] = aten.view(mm, [2, 8, 16])
    view_13: f32[2, 8, 2, 8] = aten.view(view_12, [2, 8, 2, 8])
    transpose_5: f32[2, 2, 8, 8] = aten.transpose.int(view_13, 1, 2)
    clone_4: f32[2, 2, 8, 8] = aten.clone(transpose_5, memory_format=torch.contiguous_format)
    _unsafe_view_4: f32[4, 8, 8] = aten._unsafe_view(clone_4, [4, 8, 8])
    transpose_6: f32[4, 8, 8] = aten.transpose.int(view_6, 1, 2)
    bmm_2: f32[4, 8, 8] = aten.bmm(transpose_6, _unsafe_view_4)
    transpose_7: f32[4, 8, 8] = aten.transpose.int(_unsafe_view_2, 1, 2)
    bmm_3: f32[4, 8, 8] = aten.bmm(_unsafe_view_4, transpose_7)
    view_14: f32[2, 2, 8, 8] = aten.view(bmm_2, [2, 2, 8, 8])
    view_15: f32[2, 2, 8, 8] = aten.view(bmm_3, [2, 2, 8, 8])
    detach_1: f32[2, 2, 8, 8] = aten.detach(detach)
    _softmax_backward_data: f32[2, 2, 8, 8] = aten._softmax_backward_data(view_15, detach_1, -1, f32)
    mul_1: f32[2, 2, 8, 8] = aten.mul.Tensor(_softmax_backward_data, 0.35355339059327373)
    view_16: f32[4, 8, 8] = aten.view(mul_1, [4, 8, 8])
    transpose_8: f32[4, 8, 8] = aten.transpose.int(_unsafe_view, 1, 2)
    bmm_4: f32[4, 8, 8] = aten.bmm(transpose_8, view_16)
    transpose_9: f32[4, 8, 8] = aten.transpose.int(_unsafe_view_1, 1, 2)
    bmm_5: f32[4, 8, 8] = aten.bmm(view_16, transpose_9)
    view_17: f32[2, 2, 8, 8] = aten.view(bmm_4, [2, 2, 8, 8])
    view_18: f32[2, 2, 8, 8] = aten.view(bmm_5, [2, 2, 8, 8])
    transpose_10: f32[2, 2, 8, 8] = aten.transpose.int(view_17, -2, -1)
    transpose_11: f32[2, 8, 2, 8] = aten.transpose.int(view_14, 1, 2)
    clone_5: f32[2, 8, 2, 8] = aten.clone(transpose_11, memory_format=torch.contiguous_format)
    _unsafe_view_5: f32[2, 8, 16] = aten._unsafe_view(clone_5, [2, 8, 16])
    transpose_12: f32[2, 8, 2, 8] = aten.transpose.int(transpose_10, 1, 2)
    view_19: f32[2, 8, 16] = aten.view(transpose_12, [2, 8, 16])
    transpose_13: f32[2, 8, 2, 8] = aten.transpose.int(view_18, 1, 2)
    clone_6: f32[2, 8, 2, 8] = aten.clone(transpose_13, memory_format=torch.contiguous_format)
    _unsafe_view_6: f32[2, 8, 16] = aten._unsafe_view(clone_6, [2, 8, 16])
    cat: f32[2, 8, 48] = aten.cat([_unsafe_view_6, view_19, _unsafe_view_5], 2)
    view_20: f32[16, 48] = aten.view(cat, [16, 48])
    t_6: f32[48, 16] = aten.t(view_20)
    mm_2: f32[48, 16] = aten.mm(t_6, view)
    t_7: f32[16, 48] = aten.t(mm_2)
    sum_2: f32[1, 48] = aten.sum.dim_IntList(view_20, [0], True)
    view_21: f32[48] = aten.view(sum_2, [48])
    t_8: f32[48, 16] = aten.t(t_7)
    return [None, t_8, view_21, t_5, view_11]
----- plan -----
tensor          shape            stride           bytes  group  offset  write
--------------  ---------------  ---------------  -----  -----  ------  ---------
view            f32[16, 16]      [16, 1]          1024   g0     -       no slot
_unsafe_view    f32[4, 8, 8]     [64, 8, 1]       1024   g1     0       copy-free
_unsafe_view_1  f32[4, 8, 8]     [64, 8, 1]       1024   g2     1024    copy-free
detach          f32[2, 2, 8, 8]  [128, 64, 8, 1]  1024   g3     2048    copy-free
view_6          f32[4, 8, 8]     [64, 8, 1]       1024   g3     2048    copy-free
_unsafe_view_2  f32[4, 8, 8]     [64, 8, 1]       1024   g4     3072    copy-free
view_8          f32[16, 16]      [16, 1]          1024   g5     4096    copy-free
t_1             f32[16, 16]      [1, 16]          1024   g6     -       no slot

groups:
  g0: no slot   offset 0, 1024 bytes  (user input: the caller owns it)
  g1: copy-free offset 0, 1024 bytes  (clone is itself a copy: aten::copy_ writes it into the slot)
  g2: copy-free offset 1024, 1024 bytes  (clone_1 is itself a copy: aten::copy_ writes it into the slot)
  g3: copy-free offset 2048, 1024 bytes  (aten::_softmax.out writes it in place)
  g4: copy-free offset 3072, 1024 bytes  (clone_2 is itself a copy: aten::copy_ writes it into the slot)
  g5: copy-free offset 4096, 1024 bytes  (clone_3 is itself a copy: aten::copy_ writes it into the slot)
  g6: no slot   offset 0, 1024 bytes  (parameter or buffer: outlives every replay)
arena bytes per slot: 5120
saved bytes in slot: 5120, copy-free: 5120
bytes copied per forward: 0
partitioned by: default""")


def test_aliasing_views_share_one_placement():
    # The default partitioner saves the views themselves; min-cut would save only their base.
    torch.manual_seed(0)
    model = Aliasing()
    xs = [torch.randn(4, 8), torch.randn(4, 8)]
    check_numerics(model, xs, partitioner="default")
    check_numerics(model, xs, partitioner="default", copy_free=False)
    assert_expected_inline(explain(model, xs[0], slots=2, partitioner="default"), """\
===== graph 0 (v0 of region 0) =====
----- forward (rewritten) -----
def forward(
    primals_1: f32[8, 16],
    primals_2: f32[4, 8],
    slot_mm: f32[4, 16] @ slot byte 0,
):
    mm: f32[4, 16] = aten.mm.out(primals_2, primals_1, out=slot_mm)  # copy-free: slot bytes [0, 256) hold group 1
    split = aten.split.Tensor(mm, 8, -1)
    getitem: f32[4, 8] = getitem(split, 0)
    getitem_1: f32[4, 8] = getitem(split, 1)
    mul: f32[4, 8] = aten.mul.Tensor(getitem, getitem_1)
    sum_1: f32[] = aten.sum(mul)
    t: f32[8, 4] = aten.t(getitem_1)
    slice_1: f32[1, 8] = aten.slice.Tensor(getitem, 0, 0, 1)
    expand: f32[4, 8] = aten.expand(slice_1, [4, 8])
    mm_1: f32[8, 8] = aten.mm(t, expand)
    sum_2: f32[] = aten.sum(mm_1)
    add: f32[] = aten.add.Tensor(sum_1, sum_2)
    return [add, primals_2, getitem, getitem_1, t, expand]
----- backward -----
def backward(
    primals_2: f32[4, 8],
    getitem: f32[4, 8],  # read from slot: group 1 at byte 0
    getitem_1: f32[4, 8],  # read from slot: group 1 at byte 32
    t: f32[8, 4],  # read from slot: group 1 at byte 32
    expand: f32[4, 8],  # read from slot: group 1 at byte 0
    tangents_1: f32[],
):
    expand_1: f32[8, 8] = aten.expand(tangents_1, [8, 8])
    t_1: f32[4, 8] = aten.t(t)
    mm_2: f32[4, 8] = aten.mm(t_1, expand_1)
    t_2: f32[8, 4] = aten.t(expand)
    mm_3: f32[8, 4] = aten.mm(expand_1, t_2)
    sum_3: f32[1, 8] = aten.sum.dim_IntList(mm_2, [0], True)
    slice_backward: f32[4, 8] = aten.slice_backward(sum_3, [4, 8], 0, 0, 1, 1)
    t_3: f32[4, 8] = aten.t(mm_3)
    expand_2: f32[4, 8] = aten.expand(tangents_1, [4, 8])
    mul_1: f32[4, 8] = aten.mul.Tensor(expand_2, getitem)
    mul_2: f32[4, 8] = aten.mul.Tensor(expand_2, getitem_1)
    add_1: f32[4, 8] = aten.add.Tensor(slice_backward, mul_2)
    add_2: f32[4, 8] = aten.add.Tensor(t_3, mul_1)
    cat: f32[4, 16] = aten.cat([add_1, add_2], 1)
    t_4: f32[8, 4] = aten.t(primals_2)
    mm_4: f32[8, 16] = aten.mm(t_4, cat)
    return [mm_4, None]
----- plan -----
tensor     shape      stride   bytes  group  offset  write
---------  ---------  -------  -----  -----  ------  ---------
primals_2  f32[4, 8]  [8, 1]   128    g0     -       no slot
getitem    f32[4, 8]  [16, 1]  224    g1     0       copy-free
getitem_1  f32[4, 8]  [16, 1]  224    g1     32      copy-free
t          f32[8, 4]  [1, 16]  224    g1     32      copy-free
expand     f32[4, 8]  [0, 1]   32     g1     0       copy-free

groups:
  g0: no slot   offset 0, 128 bytes  (user input: the caller owns it)
  g1: copy-free offset 0, 256 bytes  (aten::mm.out writes it in place)
arena bytes per slot: 512
saved bytes in slot: 256, copy-free: 256
bytes copied per forward: 0
partitioned by: default""")
    # The backward graph is the one above; its placeholders (what the slot holds) are kept.
    assert_expected_inline(without_backward_body(explain(
        model, xs[0], slots=2, partitioner="default", copy_free=False)), """\
===== graph 0 (v0 of region 0) =====
----- forward (rewritten) -----
def forward(
    primals_1: f32[8, 16],
    primals_2: f32[4, 8],
    slot_mm: f32[4, 16] @ slot byte 0,
    slot_getitem: f32[4, 8] @ slot byte 0,
    slot_getitem_1: f32[4, 8] @ slot byte 32,
    slot_t: f32[8, 4] @ slot byte 32,
    slot_expand: f32[4, 8] @ slot byte 0,
):
    mm: f32[4, 16] = aten.mm(primals_2, primals_1)
    copy__default = aten.copy_(slot_mm, mm)  # copied: slot bytes [0, 256) hold group 1
    split = aten.split.Tensor(mm, 8, -1)
    getitem: f32[4, 8] = getitem(split, 0)
    getitem_1: f32[4, 8] = getitem(split, 1)
    mul: f32[4, 8] = aten.mul.Tensor(getitem, getitem_1)
    sum_1: f32[] = aten.sum(mul)
    t: f32[8, 4] = aten.t(getitem_1)
    slice_1: f32[1, 8] = aten.slice.Tensor(getitem, 0, 0, 1)
    expand: f32[4, 8] = aten.expand(slice_1, [4, 8])
    mm_1: f32[8, 8] = aten.mm(t, expand)
    sum_2: f32[] = aten.sum(mm_1)
    add: f32[] = aten.add.Tensor(sum_1, sum_2)
    return [add, primals_2, slot_getitem, slot_getitem_1, slot_t, slot_expand]
----- backward -----
def backward(
    primals_2: f32[4, 8],
    getitem: f32[4, 8],  # read from slot: group 1 at byte 0
    getitem_1: f32[4, 8],  # read from slot: group 1 at byte 32
    t: f32[8, 4],  # read from slot: group 1 at byte 32
    expand: f32[4, 8],  # read from slot: group 1 at byte 0
    tangents_1: f32[],
):
    ...
----- plan -----
tensor     shape      stride   bytes  group  offset  write
---------  ---------  -------  -----  -----  ------  --------------------
primals_2  f32[4, 8]  [8, 1]   128    g0     -       no slot
getitem    f32[4, 8]  [16, 1]  224    g1     0       copied (alias of mm)
getitem_1  f32[4, 8]  [16, 1]  224    g1     32      copied (alias of mm)
t          f32[8, 4]  [1, 16]  224    g1     32      copied (alias of mm)
expand     f32[4, 8]  [0, 1]   32     g1     0       copied (alias of mm)

groups:
  g0: no slot   offset 0, 128 bytes  (user input: the caller owns it)
  g1: copied    offset 0, 256 bytes  (copy_free=False)
      copy-free would take: copy_free=True
arena bytes per slot: 512
saved bytes in slot: 256, copy-free: 0
bytes copied per forward: 256
partitioned by: default""")


class StrideZeroSlice(torch.nn.Module):
    """Saves ``h[:, :1].expand(B, 8)``: a stride-0 view of one column of a bigger tensor."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.w = torch.nn.Parameter(torch.randn(8))

    def forward(self, x):
        h = self.lin(x)
        return h[:, :1].expand(x.shape[0], 8) * self.w


def test_a_stride_zero_member_is_copied_one_slice():
    # The saved views cover only part of their storage, so the member is copied on its own;
    # its expanded dimension holds one value: copy_ takes one slice of it (copy_ refuses a
    # destination whose elements overlap), and the slot view carries the expanded layout.
    torch.manual_seed(0)
    model = StrideZeroSlice()
    xs = [torch.randn(4, 8), torch.randn(4, 8)]
    check_numerics(model, xs, partitioner="default")
    assert_expected_inline(explain(model, xs[0], slots=2, partitioner="default"), """\
===== graph 0 (v0 of region 0) =====
----- forward (rewritten) -----
def forward(
    primals_1: f32[8, 8],
    primals_2: f32[8],
    primals_3: f32[4, 8],
    primals_4: f32[8],
    slot_expand: f32[4, 8] @ slot byte 0,
):
    t: f32[8, 8] = aten.t(primals_1)
    addmm: f32[4, 8] = aten.addmm(primals_2, primals_3, t)
    slice_1: f32[4, 1] = aten.slice.Tensor(addmm, 1, 0, 1)
    expand: f32[4, 8] = aten.expand(slice_1, [4, 8])
    slice_tensor = aten.slice.Tensor(expand, 1, 0, 1)
    slice_tensor_1 = aten.slice.Tensor(slot_expand, 1, 0, 1)
    copy__default = aten.copy_(slice_tensor_1, slice_tensor)  # copied: slot bytes [0, 100) hold group 2
    mul: f32[4, 8] = aten.mul.Tensor(expand, primals_4)
    return [mul, primals_3, primals_4, slot_expand]
----- backward -----
def backward(
    primals_3: f32[4, 8],
    primals_4: f32[8],
    expand: f32[4, 8],  # read from slot: group 2 at byte 0
    tangents_1: f32[4, 8],
):
    mul_1: f32[4, 8] = aten.mul.Tensor(tangents_1, expand)
    mul_2: f32[4, 8] = aten.mul.Tensor(tangents_1, primals_4)
    sum_1: f32[1, 8] = aten.sum.dim_IntList(mul_1, [0], True)
    view: f32[8] = aten.view(sum_1, [8])
    sum_2: f32[4, 1] = aten.sum.dim_IntList(mul_2, [1], True)
    slice_backward: f32[4, 8] = aten.slice_backward(sum_2, [4, 8], 1, 0, 1, 1)
    t_1: f32[8, 4] = aten.t(slice_backward)
    mm: f32[8, 8] = aten.mm(t_1, primals_3)
    t_2: f32[8, 8] = aten.t(mm)
    sum_3: f32[1, 8] = aten.sum.dim_IntList(slice_backward, [0], True)
    view_1: f32[8] = aten.view(sum_3, [8])
    t_3: f32[8, 8] = aten.t(t_2)
    return [t_3, view_1, None, view]
----- plan -----
tensor     shape      stride  bytes  group  offset  write
---------  ---------  ------  -----  -----  ------  -------------
primals_3  f32[4, 8]  [8, 1]  128    g0     -       no slot
primals_4  f32[8]     [1]     32     g1     -       no slot
expand     f32[4, 8]  [8, 0]  100    g2     0       copied (copy)

groups:
  g0: no slot   offset 0, 128 bytes  (user input: the caller owns it)
  g1: no slot   offset 0, 32 bytes  (parameter or buffer: outlives every replay)
  g2: copied    offset 0, 100 bytes  (the saved views span 100 of the 128 bytes of addmm: copying them moves 16 bytes, fewer than the 28 slot bytes keeping it whole would cost)
      copy-free would take: a slot 28 bytes larger (saving addmm whole)
arena bytes per slot: 512
saved bytes in slot: 100, copy-free: 0
bytes copied per forward: 16
partitioned by: default""")


def test_dynamic_shapes_print_symbolic_offsets():
    torch.manual_seed(0)
    model = MLP(16, 32, 2)
    check_numerics(model, [torch.randn(4, 16), torch.randn(6, 16)], dynamic=True)
    assert_expected_inline(explain(model, torch.randn(4, 16), slots=2, dynamic=True), """\
===== graph 0 (v0 of region 0) =====
----- forward (rewritten) -----
def forward(
    primals_1: f32[32, 16],
    primals_2: f32[32],
    primals_3: Sym(s77),
    primals_4: f32[s77, 16],
    primals_5: f32[16, 32],
    primals_6: f32[16],
    slot_addmm: f32[s77, 32] @ slot byte 0,
    slot_gelu: f32[s77, 32] @ slot byte 512*ceiling(s77/4),
):
    t: f32[16, 32] = aten.t(primals_1)
    addmm: f32[s77, 32] = aten.addmm.out(primals_2, primals_4, t, out=slot_addmm)  # copy-free: slot bytes [0, 128*s77) hold group 1
    gelu: f32[s77, 32] = aten.gelu.out(addmm, out=slot_gelu)  # copy-free: slot bytes [512*ceiling(s77/4), 128*s77 + 512*ceiling(s77/4)) hold group 2
    t_1: f32[32, 16] = aten.t(primals_5)
    addmm_1: f32[s77, 16] = aten.addmm(primals_6, gelu, t_1)
    return [addmm_1, primals_4, addmm, gelu, t_1, primals_3]
----- backward -----
def backward(
    primals_3: Sym(s77),
    primals_4: f32[s77, 16],
    addmm: f32[s77, 32],  # read from slot: group 1 at byte 0
    gelu: f32[s77, 32],  # read from slot: group 2 at byte 512*ceiling(s77/4)
    t_1: f32[32, 16],
    tangents_1: f32[s77, 16],
):
    t_2: f32[16, 32] = aten.t(t_1)
    mm: f32[s77, 32] = aten.mm(tangents_1, t_2)
    t_3: f32[16, s77] = aten.t(tangents_1)
    mm_1: f32[16, 32] = aten.mm(t_3, gelu)
    t_4: f32[32, 16] = aten.t(mm_1)
    sum_1: f32[1, 16] = aten.sum.dim_IntList(tangents_1, [0], True)
    view: f32[16] = aten.view(sum_1, [16])
    t_5: f32[16, 32] = aten.t(t_4)
    gelu_backward: f32[s77, 32] = aten.gelu_backward(mm, addmm)
    t_6: f32[32, s77] = aten.t(gelu_backward)
    mm_2: f32[32, 16] = aten.mm(t_6, primals_4)
    t_7: f32[16, 32] = aten.t(mm_2)
    sum_2: f32[1, 32] = aten.sum.dim_IntList(gelu_backward, [0], True)
    view_1: f32[32] = aten.view(sum_2, [32])
    t_8: f32[32, 16] = aten.t(t_7)
    return [t_8, view_1, None, None, t_5, view]
----- plan -----
tensor     shape         stride   bytes    group  offset              write
---------  ------------  -------  -------  -----  ------------------  ---------
primals_4  f32[s77, 16]  [16, 1]  64*s77   g0     -                   no slot
addmm      f32[s77, 32]  [32, 1]  128*s77  g1     0                   copy-free
gelu       f32[s77, 32]  [32, 1]  128*s77  g2     512*ceiling(s77/4)  copy-free
t_1        f32[32, 16]   [1, 32]  2048     g3     -                   no slot

groups:
  g0: no slot   offset 0, 64*s77 bytes  (user input: the caller owns it)
  g1: copy-free offset 0, 128*s77 bytes  (aten::addmm.out writes it in place)
  g2: copy-free offset 512*ceiling(s77/4), 128*s77 bytes  (aten::gelu.out writes it in place)
  g3: no slot   offset 0, 2048 bytes  (parameter or buffer: outlives every replay)
arena bytes per slot: 1024*ceiling(s77/4)
saved bytes in slot: 256*s77, copy-free: 256*s77
bytes copied per forward: 0
partitioned by: default""")


def test_in_place_update_of_an_input():
    torch.manual_seed(0)
    model = InPlaceInput()
    check_numerics(model, [torch.randn(4, 8), torch.randn(4, 8)])
    x = torch.randn(4, 8)
    expected = x * 2
    report = explain(model, x, slots=2)
    assert torch.equal(x, expected), "the caller's tensor is mutated exactly once"
    assert_expected_inline(report, """\
===== graph 0 (v0 of region 0) =====
----- forward (rewritten) -----
def forward(
    primals_1: f32[4, 8],
    primals_2: f32[8, 8],
    primals_3: f32[8],
    slot_mul: f32[4, 8] @ slot byte 0,
    slot_detach: f32[4, 8] @ slot byte 512,
):
    mul: f32[4, 8] = aten.mul.out(primals_1, 2, out=slot_mul)  # copy-free: slot bytes [0, 128) hold group 0
    t: f32[8, 8] = aten.t(primals_2)
    addmm: f32[4, 8] = aten.addmm(primals_3, mul, t)
    tanh: f32[4, 8] = aten.tanh(addmm)
    detach: f32[4, 8] = aten.detach(tanh)
    copy__default = aten.copy_(slot_detach, detach)  # copied: slot bytes [512, 640) hold group 1
    copy_: f32[4, 8] = aten.copy_(primals_1, mul)
    return [tanh, mul, copy__default]
----- backward -----
def backward(
    mul: f32[4, 8],  # read from slot: group 0 at byte 0
    detach: f32[4, 8],  # read from slot: group 1 at byte 512
    tangents_1: f32[4, 8],
):
    detach_1: f32[4, 8] = aten.detach(detach)
    tanh_backward: f32[4, 8] = aten.tanh_backward(tangents_1, detach_1)
    t_1: f32[8, 4] = aten.t(tanh_backward)
    mm: f32[8, 8] = aten.mm(t_1, mul)
    t_2: f32[8, 8] = aten.t(mm)
    sum_1: f32[1, 8] = aten.sum.dim_IntList(tanh_backward, [0], True)
    view: f32[8] = aten.view(sum_1, [8])
    t_3: f32[8, 8] = aten.t(t_2)
    return [None, t_3, view]
----- plan -----
tensor  shape      stride  bytes  group  offset  write
------  ---------  ------  -----  -----  ------  -------------
mul     f32[4, 8]  [8, 1]  128    g0     0       copy-free
detach  f32[4, 8]  [8, 1]  128    g1     512     copied (copy)

groups:
  g0: copy-free offset 0, 128 bytes  (aten::mul.out writes it in place)
  g1: copied    offset 512, 128 bytes  (a user output shares its storage)
      copy-free would take: CUDA graphs (whose runtime copies user outputs out of the slot), or not returning this value from the model
arena bytes per slot: 1024
saved bytes in slot: 256, copy-free: 128
bytes copied per forward: 128
partitioned by: default""")


def test_one_wait_joins_copies_that_end_close_together(monkeypatch):
    """Joins within ``join_every`` share one wait: the last copy's, first; the others say
    ``wait=False`` (on CUDA each join costs the compute stream 1-1.7 us, H200 run 28e)."""
    with_caps(monkeypatch, join_every=1.0)
    torch.manual_seed(0)
    model = MLP(16, 32, 2)
    check_numerics(model, [torch.randn(4, 16), torch.randn(4, 16)], offload="all")
    report = str(explain(model, torch.randn(4, 16), slots=2, offload="all"))
    assert_expected_inline(report[report.index("----- forward"):report.index("----- plan")], """\
----- forward (rewritten) -----
def forward(
    primals_1: f32[32, 16],
    primals_2: f32[32],
    primals_3: f32[4, 16],
    primals_4: f32[16, 32],
    primals_5: f32[16],
    host_addmm: f32[4, 32] @ host arena byte 0,
    host_gelu: f32[4, 32] @ host arena byte 512,
):
    t: f32[16, 32] = aten.t(primals_1)
    addmm: f32[4, 32] = aten.addmm(primals_2, primals_3, t)
    offload = offload(host_addmm, addmm)  # offloaded: host arena, on the d2h side stream, bytes [0, 512) hold group 1
    gelu: f32[4, 32] = aten.gelu(addmm)
    offload_1 = offload(host_gelu, gelu)  # offloaded: host arena, on the d2h side stream, bytes [512, 1024) hold group 2
    t_1: f32[32, 16] = aten.t(primals_4)
    addmm_1: f32[4, 16] = aten.addmm(primals_5, gelu, t_1)
    offload_wait = offload_wait(gelu, offload_1)  # the compute stream joins the d2h copy of gelu: its device bytes are free after
    offload_wait_1 = offload_wait(addmm, offload, wait=False)  # joined by the wait for gelu's copy (copies end in order): its device bytes are free after
    return [addmm_1, primals_3, host_addmm, host_gelu, t_1]
----- backward -----
def backward(
    primals_3: f32[4, 16],
    addmm: f32[4, 32],  # in the host arena, reloaded ahead of use: group 1 at host byte 0
    gelu: f32[4, 32],  # in the host arena, reloaded ahead of use: group 2 at host byte 512
    t_1: f32[32, 16],
    tangents_1: f32[4, 16],
):
    t_2: f32[16, 32] = aten.t(t_1)
    reload = reload(cpu, gelu)  # reloads gelu on the h2d side stream
    reload_1 = reload(cpu, addmm)  # reloads addmm on the h2d side stream
    mm: f32[4, 32] = aten.mm(tangents_1, t_2)
    t_3: f32[16, 4] = aten.t(tangents_1)
    reload_wait = reload_wait(reload_1)  # the compute stream joins the h2d copy before its first use
    getitem: f32[4, 32] = getitem(reload_wait, 0)
    reload_wait_1 = reload_wait(reload, wait=False)  # joined by the wait for reload_1 (copies end in order)
    getitem_1: f32[4, 32] = getitem(reload_wait_1, 0)
    mm_1: f32[16, 32] = aten.mm(t_3, getitem_1)
    t_4: f32[32, 16] = aten.t(mm_1)
    sum_1: f32[1, 16] = aten.sum.dim_IntList(tangents_1, [0], True)
    view: f32[16] = aten.view(sum_1, [16])
    t_5: f32[16, 32] = aten.t(t_4)
    gelu_backward: f32[4, 32] = aten.gelu_backward(mm, getitem)
    t_6: f32[32, 4] = aten.t(gelu_backward)
    mm_2: f32[32, 16] = aten.mm(t_6, primals_3)
    t_7: f32[16, 32] = aten.t(mm_2)
    sum_2: f32[1, 32] = aten.sum.dim_IntList(gelu_backward, [0], True)
    view_1: f32[32] = aten.view(sum_2, [32])
    t_8: f32[32, 16] = aten.t(t_7)
    return [t_8, view_1, None, t_5, view]
""")


def test_offload_moves_groups_to_the_host_arena():
    torch.manual_seed(0)
    model = MLP(16, 32, 2)
    check_numerics(model, [torch.randn(4, 16), torch.randn(4, 16)], offload="all")
    report = explain(model, torch.randn(4, 16), slots=2, offload="above:512")
    assert_expected_inline(report, """\
===== graph 0 (v0 of region 0) =====
----- forward (rewritten) -----
def forward(
    primals_1: f32[32, 16],
    primals_2: f32[32],
    primals_3: f32[4, 16],
    primals_4: f32[16, 32],
    primals_5: f32[16],
    host_addmm: f32[4, 32] @ host arena byte 0,
    host_gelu: f32[4, 32] @ host arena byte 512,
):
    t: f32[16, 32] = aten.t(primals_1)
    addmm: f32[4, 32] = aten.addmm(primals_2, primals_3, t)
    offload = offload(host_addmm, addmm)  # offloaded: host arena, on the d2h side stream, bytes [0, 512) hold group 1
    gelu: f32[4, 32] = aten.gelu(addmm)
    offload_wait = offload_wait(addmm, offload)  # the compute stream joins the d2h copy of addmm: its device bytes are free after
    offload_1 = offload(host_gelu, gelu)  # offloaded: host arena, on the d2h side stream, bytes [512, 1024) hold group 2
    t_1: f32[32, 16] = aten.t(primals_4)
    addmm_1: f32[4, 16] = aten.addmm(primals_5, gelu, t_1)
    offload_wait_1 = offload_wait(gelu, offload_1)  # the compute stream joins the d2h copy of gelu: its device bytes are free after
    return [addmm_1, primals_3, host_addmm, host_gelu, t_1]
----- backward -----
def backward(
    primals_3: f32[4, 16],
    addmm: f32[4, 32],  # in the host arena, reloaded ahead of use: group 1 at host byte 0
    gelu: f32[4, 32],  # in the host arena, reloaded ahead of use: group 2 at host byte 512
    t_1: f32[32, 16],
    tangents_1: f32[4, 16],
):
    t_2: f32[16, 32] = aten.t(t_1)
    reload = reload(cpu, gelu)  # reloads gelu on the h2d side stream
    mm: f32[4, 32] = aten.mm(tangents_1, t_2)
    t_3: f32[16, 4] = aten.t(tangents_1)
    reload_wait = reload_wait(reload)  # the compute stream joins the h2d copy before its first use
    getitem: f32[4, 32] = getitem(reload_wait, 0)
    reload_1 = reload(cpu, addmm)  # reloads addmm on the h2d side stream
    mm_1: f32[16, 32] = aten.mm(t_3, getitem)
    t_4: f32[32, 16] = aten.t(mm_1)
    sum_1: f32[1, 16] = aten.sum.dim_IntList(tangents_1, [0], True)
    view: f32[16] = aten.view(sum_1, [16])
    t_5: f32[16, 32] = aten.t(t_4)
    reload_wait_1 = reload_wait(reload_1)  # the compute stream joins the h2d copy before its first use
    getitem_1: f32[4, 32] = getitem(reload_wait_1, 0)
    gelu_backward: f32[4, 32] = aten.gelu_backward(mm, getitem_1)
    t_6: f32[32, 4] = aten.t(gelu_backward)
    mm_2: f32[32, 16] = aten.mm(t_6, primals_3)
    t_7: f32[16, 32] = aten.t(mm_2)
    sum_2: f32[1, 32] = aten.sum.dim_IntList(gelu_backward, [0], True)
    view_1: f32[32] = aten.view(sum_2, [32])
    t_8: f32[32, 16] = aten.t(t_7)
    return [t_8, view_1, None, t_5, view]
----- plan -----
tensor     shape        stride   bytes  group  offset    write
---------  -----------  -------  -----  -----  --------  ---------
primals_3  f32[4, 16]   [16, 1]  256    g0     -         no slot
addmm      f32[4, 32]   [32, 1]  512    g1     host 0    offloaded
gelu       f32[4, 32]   [32, 1]  512    g2     host 512  offloaded
t_1        f32[32, 16]  [1, 32]  2048   g3     -         no slot

groups:
  g0: no slot   offset 0, 256 bytes  (user input: the caller owns it)
  g1: offloaded offset 0, 512 bytes  (512 B >= 512 B (above:512))
  g2: offloaded offset 512, 512 bytes  (512 B >= 512 B (above:512))
  g3: no slot   offset 0, 2048 bytes  (parameter or buffer: outlives every replay)
arena bytes per slot: 0
saved bytes in slot: 0, copy-free: 0
bytes copied per forward: 0
host arena bytes per slot: 1024, bytes offloaded per forward: 1024
partitioned by: default""")
