"""Small models used by the example, the tests and the benchmarks (no downloaded weights)."""

from __future__ import annotations

import math

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, d: int = 16, hidden: int = 32, layers: int = 2):
        super().__init__()
        dims = [d] + [hidden] * (layers - 1) + [d]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = torch.nn.functional.gelu(x)
        return x


class Attention(nn.Module):
    """Multi-head self-attention written out: matmul, softmax, view/transpose."""

    def __init__(self, d: int = 16, heads: int = 2, causal: bool = False):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.heads = heads
        self.causal = causal

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        if self.causal:
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            att = att.masked_fill(~mask, float("-inf"))
        att = att.softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads, causal=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """A small GPT-style transformer: token and position embeddings, blocks, a tied head."""

    def __init__(self, vocab: int = 64, d: int = 32, heads: int = 4, layers: int = 2,
                 max_len: int = 64):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class SplitViews(nn.Module):
    """Saved tensors that view one storage: two chunks, a transpose of one, an expand. With the
    default partitioner all four are saved, and fxslots places them as one group."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 16))

    def forward(self, x):
        h = x @ self.w
        a, b = h.chunk(2, dim=-1)
        return (a * b).sum() + (b.t() @ a[:1].expand(4, 8)).sum()


def mlp() -> nn.Module:
    """Factory for the command line: ``python -m fxslots explain examples.models:mlp``."""
    return MLP()


def attention() -> nn.Module:
    return Attention()


def gpt() -> nn.Module:
    return GPT()
