"""The backend as users meet it: the entry point, options, logging, shared arenas."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
import torch

import fxslots
from examples.models import MLP
from tests.helpers import compiled_twins

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_backend_is_found_through_the_entry_point_without_importing_fxslots():
    code = ("import sys, torch\n"
            "m = torch.compile(torch.nn.Linear(4, 4), backend='fxslots', options={'slots': 1})\n"
            "m(torch.randn(3, 4)).sum().backward()\n"
            "print('ok', 'fxslots' in sys.modules)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd="/", timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "ok True"


def test_importing_fxslots_registers_nothing():
    """The backend is found through the entry point only: importing fxslots (in a fresh
    process, where nothing has looked the backend up yet) must not register it with Dynamo."""
    code = ("import torch\n"
            "from torch._dynamo.backends import registry\n"
            "registry.list_backends()  # Dynamo's own backends and the entry points, loaded\n"
            "before = set(registry._COMPILER_FNS)\n"
            "import fxslots\n"
            "added = set(registry._COMPILER_FNS) - before\n"
            "print(sorted(added), 'fxslots' in registry.list_backends())\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "[] True", p.stdout  # nothing registered, still listed
    src = open(os.path.join(ROOT, "fxslots", "__init__.py")).read()
    assert "register_backend" not in src


@pytest.mark.parametrize("options,match", [
    ({"slot": 2}, r"unknown option\(s\) \['slot'\]; valid options are \['slots'"),
    ({"slots": "2"}, "option 'slots' must be int, got str '2'"),
    ({"slots": True}, "option 'slots' must be int, got bool"),
    ({"slots": 0}, "'slots' must be >= 1"),
    ({"alignment": 100}, "power of two"),
    ({"partitioner": "greedy"}, r"'partitioner' must be one of \['auto', 'default', 'min_cut'\]"),
    ({"on_capture_failure": "ignore"}, "'raise' or 'eager'"),
    ({"memsets": "kernel"}, "'memsets' must be 'kernels' or 'nodes', got 'kernel'"),
])
def test_bad_options_name_the_key_and_the_valid_values(options, match):
    with pytest.raises(fxslots.OptionsError, match=match):
        fxslots.Options.parse(options)
    m = torch.compile(torch.nn.Linear(4, 4), backend="fxslots", options=options)
    # Not wrapped in Dynamo's BackendCompilerFailed: `except fxslots.OptionsError` catches it.
    with pytest.raises(fxslots.OptionsError, match=match):
        m(torch.randn(2, 4))


def test_each_pass_logs_one_line(caplog):
    with caplog.at_level(logging.INFO, logger="fxslots"):
        m = torch.compile(MLP(), backend="fxslots", options={"slots": 1})
        m(torch.randn(4, 16)).sum().backward()
    passes = [r.getMessage().split(":")[0] for r in caplog.records
              if r.name == "fxslots.passes"]
    assert passes == ["tag_recompute", "retype_statistics", "collect_saved", "plan_arena",
                      "rewrite_forward", "share_slot", "verify_forward", "unalias_outputs",
                      "accumulate_grads"]


def test_torch_logs_enables_fxslots_logging():
    code = ("import torch\n"
            "m = torch.compile(torch.nn.Linear(4, 4), backend='fxslots')\n"
            "m(torch.randn(3, 4)).sum().backward()\n")
    env = dict(os.environ, TORCH_LOGS="+fxslots")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "plan_arena:" in p.stderr and "graph before" in p.stderr


def test_variants_share_one_ring_sized_by_the_largest(caplog):
    m = torch.compile(MLP(), backend="fxslots", options={"slots": 2})
    with caplog.at_level(logging.INFO, logger="fxslots"):
        for rows in (4, 16, 8):  # a bigger variant grows the arenas; a smaller one reuses them
            outs = [m(torch.randn(rows, 16)), m(torch.randn(rows, 16))]
            for o in outs:
                o.sum().backward()
    (region,) = [g for g in fxslots.regions() if g.ring.slots]
    ring = region.ring
    assert len(ring.slots) == 2
    largest = max(lay.nbytes for v in region.live_variants() for lay in v.layouts.values())
    assert [s.nbytes for s in ring.slots] == [largest, largest]
    grows = [r for r in caplog.records if "arena grows" in r.getMessage()]
    assert 2 <= len(grows) <= 4  # each slot grows at most once per bigger variant


def test_explain_report_has_graphs_plan_and_totals():
    text = str(fxslots.explain(MLP(), torch.randn(4, 16), slots=2))
    for part in ("----- forward (rewritten) -----", "----- backward -----", "----- plan -----",
                 "arena bytes per slot:", "bytes copied per forward:", "copy-free"):
        assert part in text


def test_explain_leaves_gradients_buffers_and_random_state_as_they_were():
    """explain() runs a real forward and backward on the user's model: its .grad, BatchNorm's
    running statistics and the random generators come back as they were."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.BatchNorm1d(16),
                            torch.nn.Dropout(0.5))
    m[0].weight.grad = torch.ones_like(m[0].weight)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    x = torch.randn(4, 16)
    rng = torch.get_rng_state()
    assert "----- plan -----" in str(fxslots.explain(m, x))
    assert torch.equal(m[0].weight.grad, torch.ones_like(m[0].weight))
    assert m[0].bias.grad is None
    assert all(torch.equal(v, before[k]) for k, v in m.state_dict().items())
    assert torch.equal(torch.get_rng_state(), rng)


def test_explain_leaves_no_compile_behind_and_joins_no_earlier_region():
    """Found by a review: explain's compile stayed in Dynamo's cache (with the recompile limit
    at 1 the user's own compile then ran eager), and Dynamo's reset restarts its frame ids, so
    explain's step joined an earlier model's live region (its report showed that region's
    slot, its variant v1) and a later compile could join explain's. A bad option raises before
    any reset; a step that compiled nothing says so."""
    import copy

    def mlp(d):
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(d, d), torch.nn.Tanh(), torch.nn.Linear(d, d))

    other = torch.compile(mlp(64), backend="fxslots")
    other(torch.randn(32, 64)).sum().backward()
    m = mlp(8)
    reports = [fxslots.explain(m, torch.randn(4, 8)) for _ in range(2)]
    assert [r.slots for r in reports] == [[{"ring": "region 0", "slot": 0, "bytes": 512,
                                            "host_bytes": 0, "variant": "v0", "microbatch": 0,
                                            "pending": False}]] * 2
    assert str(reports[0]) == str(reports[1])
    assert len(fxslots.regions()) == 1  # `other`'s: explain's are its own
    # config.patch, not monkeypatch: torch 2.11's config module loses the key on undo
    with torch._dynamo.config.patch(recompile_limit=1):
        ours, ref = torch.compile(m, backend="fxslots"), copy.deepcopy(m)
        x = torch.randn(4, 8)
        ours(x).sum().backward()
        ref(x).sum().backward()
        assert fxslots.counters["compiles"] == 4  # other, explain twice, and this one
        assert all(torch.equal(p.grad, q.grad) for p, q in zip(m.parameters(), ref.parameters()))
        with pytest.raises(fxslots.OptionsError, match="slotz"):
            fxslots.explain(m, x, slotz=2)
        ours(x).sum().backward()
        assert fxslots.counters["compiles"] == 4  # no reset: still compiled

    class Breaks(torch.nn.Module):
        def forward(self, x):
            for _ in range(2):
                x = torch.tanh(x)
                torch._dynamo.graph_break()
            return x
    assert str(fxslots.explain(Breaks(), x)).startswith("no graph was compiled with fxslots")


def test_inference_graphs_run_without_slots():
    m = torch.compile(MLP(), backend="fxslots", options={"slots": 1})
    with torch.no_grad():
        for _ in range(3):  # more forwards than slots: inference takes none
            m(torch.randn(4, 16))
    assert fxslots.counters["inference_graphs"] >= 1
    assert all(not r.slots for r in [g.ring for g in fxslots.regions()])


class _Prints(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

    def forward(self, x):
        h = torch.tanh(self.a(x))
        torch.ops.aten._print("a side effect")  # AOTAutograd threads an effect token
        return torch.tanh(self.b(h))


def test_a_graph_with_an_effectful_op_trains_like_aot_eager(capfd):
    """An effectful op makes AOTAutograd pass a side-effect token among the static inputs (a
    size-0 tensor when traced, None at run time): it anchors no region and takes no .grad
    (found in review: the first call raised TypeError from a weak reference to None).
    Gradients bitwise aot_eager's over three steps, added into .grad in the graph (the token
    comes first among the forward's inputs, not the backward's outputs: the twin's buffers
    once took their layouts from the input before each parameter, and the twin failed)."""
    import warnings

    ours, ref, f, g = compiled_twins(_Prints)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no twin given up
        for _ in range(3):
            x = torch.randn(4, 16)
            f(x).sum().backward()
            g(x).sum().backward()
    for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)
    assert fxslots.counters["fallbacks"] == 0
    (region,) = fxslots.regions()
    assert all(v.accumulate is not None for v in region.live_variants())
    assert "a side effect" in capfd.readouterr().out


def test_explain_shows_a_graph_whose_trace_failed(monkeypatch):
    """A graph whose trace for fxslots fails runs as traced, with a warning; explain's report
    shows it and why (it was missing: an empty report, found by a review)."""
    from fxslots import kernels

    def fails(options):
        raise RuntimeError("injected")
    monkeypatch.setattr(kernels, "decompositions", fails)
    with pytest.warns(UserWarning, match="tracing it failed: .*injected"):
        report = fxslots.explain(MLP(), torch.randn(4, 16))
    (g,) = report.graphs
    assert "tracing it failed" in g.fallback and "injected" in str(report)
    assert str(report).startswith("===== graph 0 =====\nruns without slots:")
