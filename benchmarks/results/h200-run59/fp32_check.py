"""Run 59c probe: is llama-large 1F1B's bf16 gradient error under fxslots (1.3e-2 against eager's
own 9.6e-3, run 59b) rounding, or wrong bytes? The same schedule in fp32 with TF32 off, at
sequences 512 and 1024 (two fp32 models fit beside each other there): against an eager twin,
rounding reads about 1e-6, a slot read from the wrong microbatch about 1e-1.
Usage: PYTHONPATH=. python3 fp32_check.py SCHEDULE [KERNELS [smoke]] (smoke: llama-tiny on CPU)"""
import sys

import torch

import fxslots
from benchmarks import bench_work as bw
from benchmarks.bench_plan import MODELS, SMOKE_MODELS, slots_for

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
plain = bw.build_model
bw.build_model = lambda cfg, device: plain(cfg, device).float()
schedule = sys.argv[1]
kernels = sys.argv[2] if len(sys.argv) > 2 else "aten"
smoke = len(sys.argv) > 3
cfg = (SMOKE_MODELS if smoke else MODELS)["llama-large"]  # llama-tiny in the smoke set
seqs = (16, 32) if smoke else (512, 1024)
work = bw.Workload(dict(cfg, seqs=seqs), "cpu" if smoke else "cuda",
                   microbatches=4 if schedule == "1f1b" else 1)
slots = slots_for(schedule, 2)
f = bw.compile_case(work.model, "fxslots", {"slots": slots, "kernels": kernels}, None)
step = bw.make_step(schedule, work, lambda: None)
run = bw.with_zero_grad(step, work.model, schedule)
for k in range(4):  # compile, warm up and capture every variant
    run(f, k)
if not smoke:
    torch.cuda.synchronize()
errs = [bw.grad_error(work, f, step) for _ in range(2)]
print(f"{cfg['size']} fp32 {schedule} kernels={kernels} slots={slots}: grad err against eager "
      f"{errs}; captures {fxslots.counters['captures']}")
