"""A zoo of real model families, tiny and random: HuggingFace transformers' Llama (decoder),
BERT (encoder), T5 (encoder-decoder) and Mixtral (MoE), plus an in-tree conv net with
BatchNorm in train mode. Built in code from configs: nothing is downloaded.

``train`` runs two shape variants with both microbatches in flight (two forwards, then two
backwards) and returns what the zoo tests compare bitwise against aot_eager: gradients,
outputs, buffers, and the copy-free fraction of the saved bytes.
"""

from __future__ import annotations

import contextlib
import copy
import os
import warnings
from dataclasses import dataclass, field

import torch
from torch import nn

import fxslots
from fxslots.geometry import evaluate
from fxslots.report import recording

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tiny random configs only: never the hub

VOCAB = 128


class _Logits(nn.Module):
    """A transformers model called on token ids, returning its logits."""

    def __init__(self, model: nn.Module, seq2seq: bool = False):
        super().__init__()
        self.m = model
        self.seq2seq = seq2seq

    def forward(self, ids):
        if self.seq2seq:
            return self.m(input_ids=ids, decoder_input_ids=ids[:, :-1]).logits
        return self.m(input_ids=ids).logits


def _hf(family: str, dropout: float = 0.1):
    import transformers as tf

    p = dropout
    common = dict(vocab_size=VOCAB, max_position_embeddings=64)
    if family == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, attention_dropout=p, **common))
    if family == "bert":
        return tf.BertForMaskedLM(tf.BertConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            hidden_dropout_prob=p, attention_probs_dropout_prob=p, **common))
    if family == "t5":
        return tf.T5ForConditionalGeneration(tf.T5Config(
            vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
            num_heads=4, dropout_rate=p, decoder_start_token_id=0))
    if family == "mixtral":
        return tf.MixtralForCausalLM(tf.MixtralConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
            attention_dropout=p, **common))
    raise ValueError(family)


class ConvNet(nn.Module):
    """A small ResNet-style net: conv, BatchNorm (train mode), ReLU, max-pool, a residual block."""

    def __init__(self):
        super().__init__()

        def block(i, o, stride):
            return nn.Sequential(nn.Conv2d(i, o, 3, stride, 1, bias=False), nn.BatchNorm2d(o),
                                 nn.ReLU())

        self.stem = nn.Sequential(block(3, 8, 1), nn.MaxPool2d(2))
        self.down = block(8, 16, 2)
        self.res = nn.Sequential(block(16, 16, 1), nn.Conv2d(16, 16, 3, 1, 1, bias=False),
                                 nn.BatchNorm2d(16))
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        x = self.down(self.stem(x))
        x = torch.relu(x + self.res(x))
        return self.head(x.mean((2, 3)))


FAMILIES = ("llama", "bert", "t5", "mixtral")


def build(family: str, checkpointing: bool = False, dropout: float = 0.1) -> nn.Module:
    """A tiny random model of ``family`` ("conv" or one of FAMILIES), in train mode."""
    torch.manual_seed(0)
    if family == "conv":
        return ConvNet().train()
    model = _Logits(_hf(family, dropout), seq2seq=family == "t5").train()
    if checkpointing:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # transformers' deprecation notes
            # transformers 5.25's name; older releases (the GPU machine's) have the other
            enable = getattr(model.m, "activation_checkpointing_enable", None) \
                or model.m.gradient_checkpointing_enable
            enable({"use_reentrant": False})
        # transformers 5.25 warns through a logger (a graph break) when a checkpointed model
        # keeps its KV cache on; training never uses it. T5's decoder has a config of its own.
        for mod in model.m.modules():
            if hasattr(getattr(mod, "config", None), "use_cache"):
                mod.config.use_cache = False
    return model


def inputs(family: str) -> list[torch.Tensor]:
    """Two shape variants: sequence 8 and 12 (images 16 and 20 pixels), batch 2."""
    g = torch.Generator().manual_seed(1)
    if family == "conv":
        return [torch.randn(2, 3, n, n, generator=g) for n in (16, 20)]
    return [torch.randint(0, VOCAB, (2, n), generator=g) for n in (8, 12)]


@dataclass
class Result:
    grads: list[torch.Tensor | None]
    outputs: list[torch.Tensor]
    buffers: list[torch.Tensor]
    saved_bytes: int = 0  # slot bytes over every variant that ran
    copy_free_bytes: int = 0
    fallbacks: list[str] = field(default_factory=list)
    graphs: int = 0  # graphs fxslots compiled: one per shape unless Dynamo broke the model up
    inductor_fallbacks: int = 0  # graphs Inductor refused under kernels="inductor" (run ATen)

    @property
    def copy_free_fraction(self) -> float:
        return self.copy_free_bytes / self.saved_bytes if self.saved_bytes else 1.0


def train(model: nn.Module, backend: str, xs: list[torch.Tensor], *, dynamic: bool | None,
          options: dict | None = None) -> Result:
    """Both forwards, then both backwards, of a fresh copy of ``model`` under ``backend``."""
    fxslots.reset()
    torch.manual_seed(0)
    m = copy.deepcopy(model)
    kw = {"options": options} if options else {}
    f = torch.compile(m, backend=backend, dynamic=dynamic, **kw)
    with recording() as records, _tracing():
        outs = [f(x) for x in xs]
        for o in outs:
            o.float().square().mean().backward()
    res = Result([None if p.grad is None else p.grad.clone() for p in m.parameters()],
                 [o.detach().clone() for o in outs], [b.clone() for b in m.buffers()])
    res.graphs = fxslots.counters["compiles"]
    res.inductor_fallbacks = fxslots.counters["inductor_fallbacks"]
    for rec in records:
        if rec.fallback:
            res.fallbacks.append(rec.fallback)
        if rec.plan is None:
            continue
        for layout in rec.variant.layouts.values():
            env = {s: v for s in rec.plan.capacity.free_symbols | _symbols(rec.plan)
                   for name, v in layout.key if str(s) == name}
            res.saved_bytes += evaluate(rec.plan.slot_bytes, env)
            res.copy_free_bytes += evaluate(rec.plan.copy_free_bytes, env)
    return res


def train_steps(model: nn.Module, backend: str, xs: list[torch.Tensor], *,
                dynamic: bool | None, options: dict | None = None) -> list[list]:
    """One step per input (forward, backward, then ``zero_grad(set_to_none=True)``) of a fresh
    copy of ``model``: each step's gradients. A loop that drops gradients before the next
    forward: the one whose backwards write gradients into the slot's arena (fxslots.overlay)."""
    fxslots.reset()
    torch.manual_seed(0)
    m = copy.deepcopy(model)
    kw = {"options": options} if options else {}
    f = torch.compile(m, backend=backend, dynamic=dynamic, **kw)
    grads = []
    for x in xs:
        with _tracing():
            out = f(x)
        out.float().square().mean().backward()
        grads.append([None if p.grad is None else p.grad.clone() for p in m.parameters()])
        m.zero_grad(set_to_none=True)
    return grads


def _tracing():
    """Dynamo's settings for the zoo. transformers 5.25 routes attention through ``kernels``,
    whose forward sets a context variable: under activation checkpointing Dynamo refuses that
    side effect (a graph break per layer, so checkpointed layers ran eagerly) unless told the
    backward's recompute may skip it. Here it may: the variable is set and reset around the
    same call, so the recompute sees what the forward saw."""
    if hasattr(torch._dynamo.config, "skip_fwd_side_effects_in_bwd_under_checkpoint"):
        return torch._dynamo.config.patch(skip_fwd_side_effects_in_bwd_under_checkpoint=True)
    return contextlib.nullcontext()


def _symbols(plan) -> set:
    return set().union(*(p.nbytes.free_symbols for p in plan.placements))


def assert_bitwise(a: Result, b: Result) -> None:
    for what, xs, ys in (("output", a.outputs, b.outputs), ("grad", a.grads, b.grads),
                         ("buffer", a.buffers, b.buffers)):
        for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
            assert (x is None) == (y is None), f"{what} {i}: one is None"
            if x is not None:
                assert torch.equal(x, y), f"{what} {i} differs: max {(x - y).abs().max()}"
