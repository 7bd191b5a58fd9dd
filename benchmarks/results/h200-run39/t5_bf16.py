"""Run 39e: is T5 bf16's output gap under kernels="inductor" (39b: aot_eager's 2e-2 exceeded)
Inductor's rounding or fxslots? Every backend's outputs and gradients against fp32 eager."""
import sys

import torch

sys.path.insert(0, ".")
from tests import zoo  # noqa: E402

model = zoo.build("t5", dropout=0.0).cuda()
xs = [x.cuda() for x in zoo.inputs("t5")] * 2
ref = zoo.train(model, "aot_eager", xs, dynamic=False)  # fp32
low = model.to(torch.bfloat16)
backends = {"aot_eager": ("aot_eager", None), "inductor": ("inductor", None),
            "fxslots-aten": ("fxslots", {"slots": 4, "kernels": "aten"}),
            "fxslots-inductor": ("fxslots", {"slots": 4, "kernels": "inductor"})}
chosen = sys.argv[1:] or list(backends)  # run 39e: aot_eager inductor (device time left)
runs = {n: zoo.train(low, backends[n][0], xs, dynamic=False, options=backends[n][1])
        for n in chosen}


def err(a, b):
    return max(((x.float() - y.float()).abs().max().item() for x, y in zip(a, b, strict=True)
                if x is not None), default=0.0)


for name, r in runs.items():
    print(f"{name:18s} vs fp32: outputs {err(r.outputs, ref.outputs):.4f} "
          f"grads {err(r.grads, ref.grads):.4f}; vs inductor bf16: outputs "
          f"{err(r.outputs, runs['inductor'].outputs):.4f} grads "
          f"{err(r.grads, runs['inductor'].grads):.4f}; vs aot_eager bf16: outputs "
          f"{err(r.outputs, runs['aot_eager'].outputs):.4f}")
