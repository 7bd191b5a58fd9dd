"""Memset nodes of captured CUDA graphs as kernel nodes (``fxslots.runtime.cudagraphs.memsets``),
on CPU: the plan of each kernel node, and the rewrite over a stand-in graph (edges kept, a
refused swap undone). On the GPU: tests/test_cuda_memsets.py."""

from __future__ import annotations

import ctypes

import pytest
import torch

import fxslots
from fxslots import state
from fxslots.options import Options
from fxslots.runtime.cudagraphs import memsets
from fxslots.runtime.cudagraphs.memsets import (
    MAX_BYTES, THREADS, DriverError, Launch, Memset, UnsafeGraph, empty, launch, swap_memsets)
from fxslots.runtime.cudagraphs import pool
from fxslots.runtime.cudagraphs.pool import CudaCapturer


def test_a_memset_is_one_thread_an_element_over_its_rows():
    assert launch(Memset(dst=4096, pitch=0, value=0, element_size=4, width=1, height=1)) == \
        Launch(blocks=1, args=(4096, 0, 0, 4, 1, 1))
    # pitched: 4 rows of 16 elements 256 bytes apart; 257 elements need a second block
    assert launch(Memset(8192, 256, 0x01020304, 4, 16, 4)).args == (8192, 256, 0x01020304, 4,
                                                                    16, 64)
    assert launch(Memset(0, 0, 7, 1, THREADS + 1, 1)).blocks == 2
    assert launch(Memset(0, 0, 7, 2, MAX_BYTES // 2, 1)).blocks == MAX_BYTES // 2 // THREADS


@pytest.mark.parametrize("m, why", [
    (Memset(0, 0, 0, 8, 4, 1), "its elements are 8 bytes"),
    (Memset(0, 0, 0, 1, MAX_BYTES + 1, 1), f"it writes {MAX_BYTES + 1} bytes"),
    (Memset(0, 4096, 0, 4, 1024, 257), "it writes 1052672 bytes"),
    (Memset(0, 0, 0, 4, 0, 1), "it writes nothing"),
    (Memset(4098, 0, 0, 4, 1, 1), "its 4-byte elements are not aligned"),
    (Memset(4096, 257, 0, 2, 4, 2), "its 2-byte elements are not aligned"),
])
def test_a_memset_the_kernel_does_not_suit_stays_and_says_why(m, why):
    assert why in launch(m)


class StandIn:
    """A graph as ``memsets.Graphs`` sees it (nodes, their kinds, edges), for the rewrite's
    logic on CPU; ``fail`` names calls that refuse, as the driver would: {"add_edge": 2} makes
    the second ``add_edge`` raise."""

    def __init__(self, fail=None):
        self.kind, self.edges, self.fail, self.calls = {}, set(), fail or {}, {}

    def node(self, what, after=()):
        n = max(self.kind, default=0) + 1
        self.kind[n] = what
        self.edges |= {(a, n) for a in after}
        return n

    def _call(self, name):
        self.calls[name] = self.calls.get(name, 0) + 1
        if self.fail.get(name) in (self.calls[name], "always"):
            raise DriverError(f"{name} returned CUresult 1")

    def nodes(self, graph):
        return list(self.kind)

    def memset(self, node):
        return self.kind[node] if isinstance(self.kind[node], Memset) else None

    def dependencies(self, node):
        return sorted(a for a, b in self.edges if b == node)

    def dependents(self, node):
        return sorted(b for a, b in self.edges if a == node)

    def add_kernel(self, graph, how, after):
        self._call("add_kernel")
        return self.node(how, after)

    def add_edge(self, graph, before, after):
        self._call("add_edge")
        self.edges.add((before, after))

    def destroy(self, node):
        self._call("destroy")
        del self.kind[node]
        self.edges = {(a, b) for a, b in self.edges if node not in (a, b)}

    def picture(self):
        """Each node with what it runs after, by name: kernels "k<n>", memsets their bytes."""
        def name(n):
            k = self.kind[n]
            return k if isinstance(k, str) else (
                f"memset {k.nbytes}B" if isinstance(k, Memset) else f"memset-kernel {k.args[4]}")
        return sorted((name(n), sorted(name(a) for a in self.dependencies(n))) for n in self.kind)


def _graph(fail=None):
    """k1 -> 4-byte memset -> k2, k3; k3 -> 2 MiB memset -> k4; a first 2-byte memset -> k5."""
    g = StandIn(fail)
    k1 = g.node("k1")
    small = g.node(Memset(4096, 0, 0, 4, 1, 1), [k1])
    k2, k3 = g.node("k2", [small]), g.node("k3", [small, k1])
    g.node("k4", [g.node(Memset(8192, 0, 0, 1, 2**21, 1), [k3])])
    g.node("k5", [g.node(Memset(0, 0, 9, 2, 1, 1))])
    return g


def test_swapped_memsets_keep_their_place_in_the_graph():
    g = _graph()
    assert swap_memsets(g, 0) == (2, None)
    assert g.picture() == [
        ("k1", []), ("k2", ["memset-kernel 1"]), ("k3", ["k1", "memset-kernel 1"]),
        ("k4", ["memset 2097152B"]), ("k5", ["memset-kernel 1"]),
        ("memset 2097152B", ["k3"]),  # a bulk clear stays a memset node
        ("memset-kernel 1", []), ("memset-kernel 1", ["k1"])]
    assert sorted(k.args for k in g.kind.values() if isinstance(k, Launch)) == [
        (0, 0, 9, 2, 1, 1), (4096, 0, 0, 4, 1, 1)]


@pytest.mark.parametrize("fail", [{"add_kernel": 1}, {"add_edge": 2}, {"destroy": 1}])
def test_a_refused_swap_is_undone_and_named(fail):
    """The first memset's swap fails part way: that memset stays with all its edges, no
    kernel node writes beside it, the reason names the refusal, and the other memset is still
    swapped."""
    g = _graph(fail)
    swapped, why = swap_memsets(g, 0)
    assert (swapped, g.picture()) == (1, [
        ("k1", []), ("k2", ["memset 4B"]), ("k3", ["k1", "memset 4B"]),
        ("k4", ["memset 2097152B"]), ("k5", ["memset-kernel 1"]), ("memset 2097152B", ["k3"]),
        ("memset 4B", ["k1"]), ("memset-kernel 1", [])])
    assert why == ("1 memset node(s) could not be swapped (the first: DriverError: "
                   f"{next(iter(fail))} returned CUresult 1)")


def test_a_graph_whose_nodes_cannot_be_listed_keeps_them_all():
    class Unlisted(StandIn):
        def nodes(self, graph):
            raise DriverError("cuGraphGetNodes returned CUresult 1")

    assert swap_memsets(Unlisted(), 0) == (
        0, "its nodes could not be listed (DriverError: cuGraphGetNodes returned CUresult 1)")


def test_a_swap_that_cannot_be_undone_leaves_an_unsafe_graph():
    """The capturer drops such a graph unrun and captures again (``CudaCapturer.capture``)."""
    g = _graph({"add_edge": 2, "destroy": "always"})
    with pytest.raises(UnsafeGraph) as e:
        swap_memsets(g, 0)
    assert str(e.value) == ("memset node 0x2: add_edge returned CUresult 1; the kernel node "
                            "replacing it could not be removed again (destroy returned CUresult 1)")


@pytest.mark.parametrize("fail, left", [(None, 0), ({"destroy": 3}, 6)])
def test_an_instantiated_kept_graph_is_emptied_and_a_refusal_only_keeps_nodes(fail, left):
    g = _graph(fail)
    n = len(g.kind)
    assert empty(g, 0) == n - left and len(g.kind) == left  # no error: only host memory


def test_the_capturer_empties_a_kept_graph_after_instantiating_it(monkeypatch):
    """The order matters: emptied first, the graph would be instantiated with no nodes."""
    steps = []

    class Graph:
        def raw_cuda_graph(self):
            return 7

        def instantiate(self):
            steps.append("instantiate")

    monkeypatch.setattr(pool, "device_index", lambda device: -1)  # no device to switch to
    monkeypatch.setattr(memsets, "as_kernels", lambda raw, i: steps.append(("swap", raw)) or
                        (2, None))
    monkeypatch.setattr(memsets, "release", lambda raw, i: steps.append(("release", raw)) or 5)
    c = CudaCapturer(torch.device("cuda", 0), Options(memsets="kernels"))
    assert c._instantiate(Graph()) == (2, None)
    assert steps == [("swap", 7), "instantiate", ("release", 7)]
    assert state.counters["kept_graph_nodes_released"] == 5


def _has_driver():
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_has_driver(), reason="a machine without the CUDA driver")
def test_without_a_driver_the_reason_is_kept_and_nothing_is_swapped(monkeypatch):
    monkeypatch.setattr(state, "memset_kernels", {})
    swapped, why = memsets.as_kernels(0, 0)
    assert swapped == 0 and "the CUDA driver could not load the memset kernel" in why
    assert "libcuda" in why
    assert state.memset_kernels[0] == why  # one try: the next capture is not slowed by it
    assert memsets.as_kernels(0, 0) == (0, why)


class _Capturer(CudaCapturer):
    """``CudaCapturer`` with its two CUDA steps stood in for: ``_capture`` hands out a token
    graph per call and records whether it was kept; ``_instantiate`` does what ``outcome``
    says (a count and reason, or an exception to raise)."""

    def __init__(self, outcome, **options):
        super().__init__(torch.device("cuda", 0), Options(memsets="kernels", **options))
        self.outcome, self.kept = outcome, []

    def _capture(self, gm, args, keep, room):
        self.kept.append(keep)
        return object(), ["outs"]

    def _instantiate(self, graph):
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


def test_the_capturer_keeps_a_rewritten_graph_and_counts_its_swaps():
    c = _Capturer((3, None))
    graph, outs = c.capture(None, [])
    assert c.kept == [True] and outs == ["outs"]
    assert state.counters["memsets_as_kernels"] == 3 and state.counters["twin_fallbacks"] == 0


def test_a_partly_refused_rewrite_keeps_the_graph_and_warns():
    c = _Capturer((1, "1 memset node(s) could not be swapped (the first: DriverError: x)"))
    with pytest.warns(UserWarning, match="without memset nodes as kernel nodes on cuda:0: 1 "
                      "memset node\\(s\\) could not be swapped .*'memsets': 'nodes'"):
        c.capture(None, [])
    assert c.kept == [True] and state.counters["memsets_as_kernels"] == 1


@pytest.mark.parametrize("error", [UnsafeGraph("memset node 0x2: ..."),
                                   RuntimeError("CUDA error: invalid argument")])
def test_a_graph_whose_rewrite_fails_is_captured_again_as_it_comes(error):
    c, name = _Capturer(error), type(error).__name__
    with pytest.warns(UserWarning,
                      match=f"the rewritten graph was dropped \\({name}: .*\\) and captured again"):
        c.capture(None, [])
    assert c.kept == [True, False]  # the second capture instantiates as torch does
    assert state.counters["twin_fallbacks"] == 1


def test_under_strict_a_failed_rewrite_is_an_error():
    with pytest.raises(fxslots.UnsupportedGraphError, match="strict=True"):
        _Capturer(UnsafeGraph("x"), strict=True).capture(None, [])
