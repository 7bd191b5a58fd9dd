"""Memset nodes of captured CUDA graphs as kernel nodes, on the GPU (``pytest -m cuda``): the
bytes each kernel node writes, the order it keeps with its neighbours, training that matches
the graphs left as captured bit for bit, and the warning where the driver cannot swap."""

from __future__ import annotations

import ctypes

import pytest
import torch

import fxslots
from fxslots import state
from fxslots.runtime.cudagraphs import memsets

pytestmark = pytest.mark.cuda


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
    # Emptied once instantiated, as the capturer does: the replays below run without it.
    api, raw = memsets.driver(torch.cuda.current_device()), g.raw_cuda_graph()
    n = len(api.nodes(raw))
    assert n >= 6 and memsets.release(raw, torch.cuda.current_device()) == n
    assert api.nodes(raw) == []
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

    # ATen kernels whatever FXSLOTS_KERNELS says: Inductor makes the loss one Triton reduction
    # with no memset (the attention test below covers Inductor's graphs).
    f = loss if memsets_option is None else torch.compile(
        loss, backend="fxslots",
        options={"memsets": memsets_option, "strict": strict, "kernels": "aten"})
    x = torch.randn(256, 256, device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    grads = []
    for _ in range(steps):
        f(x).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        model.zero_grad(set_to_none=True)
    return grads


def test_cuda_training_with_memsets_as_kernels_matches_memset_nodes_bit_for_bit():
    nodes = _train("nodes")  # strict=True: a fallback of any kind would raise
    assert fxslots.counters["memsets_as_kernels"] == 0
    fxslots.reset()
    kernels = _train("kernels")
    assert fxslots.counters["captures"] >= 2 and fxslots.counters["twin_fallbacks"] == 0
    assert fxslots.counters["memsets_as_kernels"] >= 1
    assert fxslots.counters["kept_graph_nodes_released"] >= fxslots.counters["captures"]
    for a, b, e in zip(nodes, kernels, _train(None), strict=True):
        for x, y, z in zip(a, b, e, strict=True):
            assert torch.equal(x, y)
            torch.testing.assert_close(y, z, rtol=1e-5, atol=1e-6)


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
