"""Memset nodes of captured CUDA graphs as kernel nodes (``fxslots.runtime.cudagraphs.memsets``):
the plan of each kernel node on CPU; on the GPU, the bytes each writes, the order it keeps with
its neighbours, and training that matches the graphs left as captured bit for bit."""

from __future__ import annotations

import ctypes
import warnings

import pytest
import torch

import fxslots
from fxslots import state
from fxslots.runtime.cudagraphs import memsets
from fxslots.runtime.cudagraphs.memsets import (
    MAX_BYTES, THREADS, DriverError, Launch, Memset, UnsafeGraph, launch, swap_memsets)


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
    kernel node writes beside it, and the reason names the refusal; nothing else is tried."""
    g, before = _graph(fail), _graph().picture()
    swapped, why = swap_memsets(g, 0)
    assert (swapped, g.picture()) == (0, before)
    assert why == ("a memset node could not be swapped (DriverError: "
                   f"{next(iter(fail))} returned CUresult 1)")


def test_a_swap_that_cannot_be_undone_leaves_an_unsafe_graph():
    """The capturer drops such a graph unrun and captures again (``CudaCapturer.capture``)."""
    g = _graph({"add_edge": 2, "destroy": "always"})
    with pytest.raises(UnsafeGraph) as e:
        swap_memsets(g, 0)
    assert str(e.value) == ("memset node 0x2: add_edge returned CUresult 1; the kernel node "
                            "replacing it could not be removed again (destroy returned CUresult 1)")


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


def _memset(name, *args):
    """A driver memset on the current stream (cuMemsetD8Async and its kin)."""
    lib = ctypes.CDLL("libcuda.so.1")
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    types = {"cuMemsetD8Async": [ctypes.c_uint8], "cuMemsetD16Async": [ctypes.c_uint16],
             "cuMemsetD32Async": [ctypes.c_uint32],
             "cuMemsetD2D32Async": [ctypes.c_size_t, ctypes.c_uint32, ctypes.c_size_t]}[name]
    fn = getattr(lib, name)
    fn.argtypes = [ctypes.c_uint64, *types, ctypes.c_size_t, ctypes.c_void_p]
    assert fn(*args, stream) == 0, name


@pytest.mark.cuda
def test_cuda_swapped_memsets_write_their_bytes_before_what_reads_them():
    """1-, 2-, 4-byte and pitched memsets, a large one left a memset node; each followed in
    the stream by a kernel that adds 1 to what it wrote, which must see the memset's bytes."""
    buf = torch.full((2**21 + 4096,), 7, dtype=torch.uint8, device="cuda")
    base, big = buf.data_ptr(), 2**21
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(g):
        _memset("cuMemsetD8Async", base + 1, 0xAB, 5)
        _memset("cuMemsetD16Async", base + 64, 0x1234, 9)
        _memset("cuMemsetD32Async", base + 256, 0xDEADBEEF, 300)
        _memset("cuMemsetD2D32Async", base + 2048, 256, 0x01020304, 16, 4)
        _memset("cuMemsetD8Async", base + 4096, 3, big)
        buf.add_(1)
    swapped, why = memsets.as_kernels(g.raw_cuda_graph(), torch.cuda.current_device())
    g.instantiate()
    assert (swapped, why) == (4, None)
    want = torch.full(buf.shape, 7, dtype=torch.uint8)
    want[1:6] = 0xAB
    want[64:82] = torch.tensor([0x34, 0x12] * 9, dtype=torch.uint8)
    want[256:1456] = torch.tensor([0xEF, 0xBE, 0xAD, 0xDE] * 300, dtype=torch.uint8)
    for r in range(4):
        row = 2048 + 256 * r
        want[row:row + 64] = torch.tensor([4, 3, 2, 1] * 16, dtype=torch.uint8)
    want[4096:] = 3
    for _ in range(3):
        buf.fill_(7)
        g.replay()
        assert torch.equal(buf.cpu(), want + 1)


def _train(memsets_option, steps=3, strict=True):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(),
                                torch.nn.Linear(1024, 2048)).cuda()
    # The loss's sum over 512k elements is a split reduction: ATen zeroes its semaphores with a
    # memset, captured as a memset node in the forward graph.
    def loss(x):
        return model(x).pow(2).mean()

    f = loss if memsets_option is None else torch.compile(
        loss, backend="fxslots", options={"memsets": memsets_option, "strict": strict})
    x = torch.randn(256, 256, device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    grads = []
    for _ in range(steps):
        f(x).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        model.zero_grad(set_to_none=True)
    return grads


@pytest.mark.cuda
def test_cuda_training_with_memsets_as_kernels_matches_memset_nodes_bit_for_bit():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback: strict=True would raise it anyway
        nodes = _train("nodes")
        assert fxslots.counters["memsets_as_kernels"] == 0
        fxslots.reset()
        kernels = _train("kernels")
    assert fxslots.counters["captures"] >= 2
    assert fxslots.counters["memsets_as_kernels"] >= 1
    for a, b, e in zip(nodes, kernels, _train(None), strict=True):
        for x, y, z in zip(a, b, e, strict=True):
            assert torch.equal(x, y)
            torch.testing.assert_close(y, z, rtol=1e-5, atol=1e-6)


@pytest.mark.cuda
def test_cuda_a_driver_that_cannot_swap_leaves_the_memsets_with_a_warning(monkeypatch):
    monkeypatch.setitem(state.memset_kernels, torch.cuda.current_device(),
                        "the CUDA driver could not load the memset kernel (test)")
    with pytest.warns(UserWarning, match="training goes on without memset nodes as kernel "
                      "nodes on cuda.*could not load the memset kernel \\(test\\)"):
        kernels = _train("kernels", steps=2, strict=False)
    assert fxslots.counters["memsets_as_kernels"] == 0
    assert fxslots.counters["twin_fallbacks"] >= 1
    for a, e in zip(kernels, _train(None, steps=2), strict=True):
        for y, z in zip(a, e, strict=True):
            torch.testing.assert_close(y, z, rtol=1e-5, atol=1e-6)


@pytest.mark.cuda
def test_cuda_attention_with_memsets_as_kernels_matches_eager():
    """bf16 causal attention (cuDNN's, on an H100 or H200, issues a memset before each kernel,
    forward and backward) trains as eager does with its memsets made kernels; cuDNN's backward
    is not deterministic, so the check is a tolerance, not bits."""
    def run(compiled):
        torch.manual_seed(0)
        proj = torch.nn.Linear(256, 3 * 256).cuda().bfloat16()

        def loss(x):
            q, k, v = proj(x).view(2, 128, 3, 4, 64).permute(2, 0, 3, 1, 4)
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return out.float().square().mean()

        f = torch.compile(loss, backend="fxslots",
                          options={"memsets": "kernels", "strict": True}) if compiled else loss
        x = torch.randn(2, 128, 256, device="cuda", dtype=torch.bfloat16,
                        generator=torch.Generator("cuda").manual_seed(1))
        for _ in range(3):
            proj.zero_grad(set_to_none=True)
            f(x).backward()
        return [p.grad for p in proj.parameters()]

    ours, eager = run(True), run(False)
    assert fxslots.counters["memsets_as_kernels"] >= 1
    for a, b in zip(ours, eager, strict=True):
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-3)
