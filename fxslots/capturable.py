"""Whether a variant's graphs can be captured as CUDA graphs: a reason string, or None.

A captured graph replays device work only. Host work inside it (a CPU op, a CPU tensor an op
reads) runs once, at capture, and every replay reuses what it computed then; so would a
generator state read at capture. Such graphs run uncaptured, with their slots
(``fallback.run_uncaptured`` says why). The rule is the one of Dynamo's ``cudagraphs`` backend
(any value on another device skips the graph), less three cases that are safe here: a 0-dim
non-static input (the executor stages it onto the device at each call), a 0-dim constant of
the graph (nothing changes it) and a 0-dim host value computed only from those, literals and
shape symbols (``aten.scalar_tensor(0.0)``, which decompositions of ``torch.where(c, x, 0.0)``
make on the CPU: a kernel argument, the same at every replay of one shape's graph). A symbol
that reads tensor data needs a host read of a device value, which fails the capture
(recovered as usual), or of a host tensor, which is flagged itself.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.fx as fx

from .schemas import SavedSet


def uncapturable_reason(saved: SavedSet | None, gm: fx.GraphModule, device: torch.device,
                        static_input_indices: Sequence[int] = ()) -> str | None:
    """Why ``gm`` (a forward, with its ``saved`` set, or a backward) cannot be a CUDA graph
    on ``device``, or None."""
    if saved is not None and saved.rng_states:
        return (f"{saved.rng_states[0]} is the RNG state activation checkpointing saves to "
                f"replay a random op in backward, host state a CUDA graph cannot read anew at "
                f"each replay; move the random op (dropout) out of the checkpointed region to "
                f"capture it")
    if saved is not None and saved.unstageable:
        return saved.unstageable[0]
    node = _off_device(gm, device, set(static_input_indices))
    if node is not None:
        val = node.meta["val"]
        return (f"node {node.name} ({node.target}) holds a {val.device} tensor of shape "
                f"{tuple(val.shape)} in a graph on {device}: a replay would reuse what the "
                f"capture computed or read there; move it to {device} to capture this graph")
    return None


def _off_device(gm: fx.GraphModule, device: torch.device, static: set[int]) -> fx.Node | None:
    placeholders = {p: i for i, p in enumerate(gm.graph.find_nodes(op="placeholder"))}
    safe: set[fx.Node] = set()  # 0-dim host values every replay sees alike
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.device == device or val.device.type == "meta":
            continue
        if val.dim() == 0 and (n.op == "get_attr" or (
                n in placeholders and placeholders[n] not in static) or (
                n.op == "call_function" and all(
                    m in safe or not isinstance(m.meta.get("val"), torch.Tensor)
                    for m in n.all_input_nodes))):
            safe.add(n)
            continue
        return n
    return None
