"""CPU probe (session 35): what Inductor's memory-driven reordering would save on the graphs
fxslots compiles without it (those that carry offload copies: ``keep_order``), by Inductor's
own estimates. Compiles llama-small's shape (12 layers, H=768, batch 2, sequence 512; fp32 on
CPU) under ``kernels="inductor"`` with the reordering forced on, and prints what
``torch._inductor.memory`` logs: "Baseline" is the order fxslots keeps; Inductor would take the
lowest of the four.

    PYTHONPATH=. python3 benchmarks/results/h200-run53/reorder_memory.py all 12
"""
import dataclasses
import logging
import sys

import torch

import fxslots.kernels as kernels
from examples.llama import SIZES, Llama, batch

lines = []


class Keep(logging.Handler):
    def emit(self, record):
        lines.append(record.getMessage())


log = logging.getLogger("torch._inductor.memory")
log.setLevel(logging.INFO)
log.addHandler(Keep())
compile_ = kernels._torch.inductor_compile


def reordering(*args, keep_order=False, **kwargs):
    lines.append(f"--- a graph fxslots compiles with keep_order={keep_order}")
    return compile_(*args, keep_order=False, **kwargs)


kernels._torch.inductor_compile = reordering
torch._inductor.config.fx_graph_cache = False  # a cached graph is not scheduled again: no log
torch.manual_seed(0)
offload, layers = sys.argv[1], int(sys.argv[2])
cfg = dataclasses.replace(SIZES["llama-small"], layers=layers)
model = Llama(cfg)
compiled = torch.compile(model, backend="fxslots",
                         options={"kernels": "inductor", "offload": offload})
compiled(*batch(cfg, 2, 512)).backward()
print("\n".join(m for m in lines if m.startswith("---") or "peak memory" in m))
