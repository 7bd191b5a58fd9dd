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
from fxslots.runtime.cudagraphs.memsets import MAX_BYTES, THREADS, Launch, Memset, launch


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
])
def test_a_memset_the_kernel_does_not_suit_stays_and_says_why(m, why):
    assert why in launch(m)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without the CUDA driver")
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


def _train(memsets_option, steps=3):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(),
                                torch.nn.Linear(1024, 512)).cuda()
    # The loss's sum over 64k elements is a split reduction: ATen zeroes its semaphores with a
    # memset, captured as a memset node in the forward graph.
    def loss(x):
        return model(x).pow(2).mean()

    f = loss if memsets_option is None else torch.compile(
        loss, backend="fxslots", options={"memsets": memsets_option, "strict": True})
    x = torch.randn(128, 256, device="cuda", generator=torch.Generator("cuda").manual_seed(1))
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
