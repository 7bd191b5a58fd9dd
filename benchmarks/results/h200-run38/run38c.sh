#!/usr/bin/env bash
# H200 run 38c (torch 2.11): issue 13's last target (kernels="inductor" at 0.95x torch.compile
# default's step on llama-large). Run 32 found the same kernels within 1% and GEMMs 80% of the
# step; can autotuned GEMMs (Inductor's max_autotune_gemm, for fxslots and for torch.compile
# alike) move it? Speed part, llama-large sequential, with TORCHINDUCTOR_MAX_AUTOTUNE_GEMM=1.
source benchmarks/gpu_setup.sh
TORCHINDUCTOR_MAX_AUTOTUNE_GEMM=1 timeout 560 python3 benchmarks/bench.py --parts speed \
  --models llama-large --schedules sequential --cases inductor,fxslots \
  --fxslots-variants '[{"kernels": "inductor"}]' --reps 7 --steps 8 --case-timeout-s 330 \
  --out "$OUT/r38c" 2>&1 | tail -25 | tee "$OUT/r38c-bench.txt"
