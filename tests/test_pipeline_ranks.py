"""A GPT split into 2 stages on 2 processes (gloo, spawn, a free port), Schedule1F1B over 4
microbatches at 2 sequence lengths, each stage compiled with fxslots with its slots from the
schedule: losses and gradients bitwise equal to the same pipeline over eager stages."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("torch.distributed.pipelining")

from examples import pipeline_gpt
from tests.helpers import torch_before


def test_two_ranks_1f1b_match_eager_stages_bitwise():
    results = pipeline_gpt.run(world=2, timeout_s=240)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for rank, r in enumerate(results):
        assert r["fxslots"].startswith(os.path.join(repo, "fxslots")), r["fxslots"]
        assert r["slots"] == {0: 2, 1: 1}  # 1F1B: num_stages - stage forwards in flight
        training = r["compiles"] - r["inference_graphs"]
        assert training == 2, f"rank {rank}: one static and one dynamic shape variant"
        assert r["inference_graphs"] == (2 if torch_before(2, 12) else 0), r
        assert r["losses_equal"], f"rank {rank}"
        assert all(r["grads_equal"]), f"rank {rank}: max |diff| {r['max_grad_diff']}"
        assert r["pending"] == 0
        [(ring, nbytes)] = r["arena_bytes"].items()
        assert ring.endswith(f"stage {rank}'") and nbytes > 0
