"""CPU probe (session 35): what sizes the graph pool on llama-large's shape under ATen kernels.
One layer (each layer's temporaries are at most 176 MiB here; the loss head does not depend on
the layer count), batch 4, sequence 2048, vocab 32000, bf16. Prints, for the rewritten forward
and backward, the most bytes their own allocations hold at once (``lifetimes.allocated_peak``:
what a capture takes from the pool) and the largest values they allocate (views and out=
results allocate nothing).

    PYTHONPATH=. python3 benchmarks/results/h200-run53/loss_head_peak.py
"""
import dataclasses

import torch

import fxslots
from examples.llama import SIZES, Llama, batch
from fxslots.costs import allocated_bytes
from fxslots.passes.lifetimes import allocated_peak, may_return_alias

torch.manual_seed(0)
cfg = dataclasses.replace(SIZES["llama-large"], layers=1)
model = Llama(cfg).to(torch.bfloat16)
variant = fxslots.explain(model, *batch(cfg, 4, 2048)).graphs[0].variant
MiB = 2**20
for name, gm in (("forward", variant.forward_graph), ("backward", variant.backward_graph)):
    peak, held = allocated_peak(gm)
    print(f"{name}: its own allocations hold at most {peak / MiB:.0f} MiB at once")
    values = sorted(((allocated_bytes(n), n.name, str(n.target)) for n in gm.graph.nodes
                     if n.op == "call_function" and not may_return_alias(n.target)),
                    reverse=True)
    for nbytes, node, target in values[:6]:
        print(f"    {nbytes / MiB:6.0f} MiB  {node}  {target}")
