"""H200 run 48b: is offload="auto"'s cost on llama-small host launch time or device time?

Run 48a's traces (under the profiler) showed the compute stream idle beside the copies at
points where nothing on the device waits (a forward's end, long after its last copy). Here, per
case: the host time of the forward and backward calls (perf_counter), and their device time
(CUDA events) twice: as a loop runs them, and with the device held busy first
(``torch.cuda._sleep``) so the host is sure to have launched the whole graph before the device
reaches it. A cost that is gone behind the sleep is the launch's.

    python3 benchmarks/results/h200-run48/launch_or_device.py OUT_DIR [case ...]

``NO_CUDNN_SDP=1`` (run 49): PyTorch's SDPA without its cuDNN backend (flash attention then),
whose kernels come with a memset node each.
"""

import copy
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.getcwd())
import fxslots  # noqa: E402,F401
from examples.llama import SIZES, Llama, batch  # noqa: E402

if os.environ.get("NO_CUDNN_SDP"):
    torch.backends.cuda.enable_cudnn_sdp(False)
out = sys.argv[1]
cases = sys.argv[2:] or ["none", "auto"]
cfg = SIZES["llama-small"]
torch.manual_seed(0)
base = Llama(cfg).cuda().to(torch.bfloat16)
data = batch(cfg, 2, 512, "cuda", torch.Generator(device="cuda").manual_seed(0))
models = {}
for c in cases:
    m = copy.deepcopy(base)
    f = torch.compile(m, backend="fxslots", options={"slots": 1, "offload": c})
    for _ in range(6):
        f(*data).backward()
        m.zero_grad(set_to_none=True)
    models[c] = (f, m)
torch.cuda.synchronize()


def one(c, sleep):
    f, m = models[c]
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    if sleep:
        torch.cuda._sleep(4_000_000)
    ev[0].record()
    t0 = time.perf_counter()
    loss = f(*data)
    t1 = time.perf_counter()
    ev[1].record()
    if sleep:
        torch.cuda._sleep(6_000_000)
    ev[2].record()
    t2 = time.perf_counter()
    loss.backward()
    t3 = time.perf_counter()
    ev[3].record()
    m.zero_grad(set_to_none=True)
    return ev, (t1 - t0) * 1e6, (t3 - t2) * 1e6


res = {c: {k: [] for k in ("fwd_dev", "bwd_dev", "fwd_host", "bwd_host",
                           "fwd_dev_sleep", "bwd_dev_sleep")} for c in cases}
for r in range(12):
    for c in (cases if r % 2 == 0 else cases[::-1]):
        for sleep in (False, True):
            runs = [one(c, sleep) for _ in range(6)]
            torch.cuda.synchronize()
            tag = "_sleep" if sleep else ""
            for ev, fh, bh in runs:
                res[c]["fwd_dev" + tag].append(ev[0].elapsed_time(ev[1]) * 1e3)
                res[c]["bwd_dev" + tag].append(ev[2].elapsed_time(ev[3]) * 1e3)
                if not sleep:
                    res[c]["fwd_host"].append(fh)
                    res[c]["bwd_host"].append(bh)
summary = {c: {k: round(statistics.median(v), 1) for k, v in d.items()} for c, d in res.items()}
print("median us:", json.dumps(summary, indent=1))
with open(os.path.join(out, "launch_or_device.json"), "w") as fh:
    json.dump({"summary": summary, "samples": res}, fh)
