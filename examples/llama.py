"""A Llama-style decoder, in plain PyTorch: RMSNorm, rotary embeddings, grouped-query attention
through SDPA, a SwiGLU MLP and a cross-entropy loss. The benchmark's transformer."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


@dataclass(frozen=True)
class LlamaConfig:
    dim: int = 768
    layers: int = 12
    heads: int = 12
    kv_heads: int = 4
    ffn: int = 2048
    vocab: int = 8192
    max_seq: int = 2048
    checkpoint: bool = False  # activation checkpointing: each block recomputed in backward


SIZES = {
    # The benchmark's two sizes (issue 13): launch-bound and compute-bound.
    "llama-small": LlamaConfig(dim=768, layers=12, heads=12, kv_heads=4, ffn=2048),
    "llama-large": LlamaConfig(dim=2048, layers=8, heads=16, kv_heads=4, ffn=5632, vocab=32000),
    "llama-tiny": LlamaConfig(dim=64, layers=2, heads=4, kv_heads=2, ffn=128, vocab=128,
                              max_seq=64),
}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.heads, self.kv_heads = cfg.heads, cfg.kv_heads
        self.head_dim = cfg.dim // cfg.heads
        self.q = nn.Linear(cfg.dim, cfg.heads * self.head_dim, bias=False)
        self.kv = nn.Linear(cfg.dim, 2 * cfg.kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(cfg.heads * self.head_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(b, s, 2 * self.kv_heads, self.head_dim).transpose(1, 2).chunk(2, 1)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        rep = self.heads // self.kv_heads  # grouped-query: each KV head serves `rep` heads
        k = k[:, :, None].expand(b, self.kv_heads, rep, s, self.head_dim).reshape(b, -1, s,
                                                                                  self.head_dim)
        v = v[:, :, None].expand(b, self.kv_heads, rep, s, self.head_dim).reshape(b, -1, s,
                                                                                  self.head_dim)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, s, -1))


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(cfg.dim), RMSNorm(cfg.dim)
        self.attn = Attention(cfg)
        self.gate_up = nn.Linear(cfg.dim, 2 * cfg.ffn, bias=False)
        self.down = nn.Linear(cfg.ffn, cfg.dim, bias=False)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.attn_norm(x), cos, sin)
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Llama(nn.Module):
    """``model(tokens, targets)`` returns the mean cross-entropy loss."""

    def __init__(self, cfg: LlamaConfig = LlamaConfig()):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        hd = cfg.dim // cfg.heads
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        freqs = torch.outer(torch.arange(cfg.max_seq).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        s = tokens.shape[1]
        x = self.embed(tokens)
        cos, sin = self.cos[:s].to(x.dtype), self.sin[:s].to(x.dtype)
        for block in self.blocks:
            if self.cfg.checkpoint:
                x = checkpoint(block, x, cos, sin, use_reentrant=False)
            else:
                x = block(x, cos, sin)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def llama(size: str = "llama-tiny") -> Llama:
    """A factory for ``python -m fxslots explain examples.llama:llama``."""
    return Llama(SIZES[size])


def batch(cfg: LlamaConfig, b: int, s: int, device="cpu", generator=None):
    """Random (tokens, targets) of shape (b, s)."""
    t = torch.randint(0, cfg.vocab, (b, s + 1), device=device, generator=generator)
    return t[:, :-1].contiguous(), t[:, 1:].contiguous()
