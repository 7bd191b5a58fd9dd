#!/usr/bin/env bash
# H200 run 43: what the fences cost under kernels="inductor" (issue 13). 42a/42c: gradients in
# the arena (fenced backward) ran 1.026-1.03x torch.compile, the unfenced variant 0.99x. Since,
# reads Inductor fuses into a gradient's kernel count at its write (fence.fused_reads): on CPU
# the fenced bf16 llama's RMSNorm weight gradients no longer store their product before a fence.
# 1. paired.py llama-large sequential, interleaved reps: fxslots kernels=inductor (fenced),
#    the same with grads_in_arena=false (unfenced), torch.compile default.
# 2. profile_kernels.py: kernel by kernel, fenced against unfenced, with Inductor's code of
#    each (code-*.txt), to name the fusions the fences change.
source benchmarks/gpu_setup.sh
t0=$(date +%s)
timeout 230 python3 benchmarks/paired.py llama-large sequential \
  fxslots+kernels=inductor,fxslots+kernels=inductor+grads_in_arena=false,inductor \
  --reps 7 --steps 8 --out "$OUT/r43-paired.json" 2>&1 | grep -v "torch.__trace" \
  | tail -30 | tee "$OUT/r43-paired.txt"
echo "t=$(( $(date +%s) - t0 ))"
timeout 270 python3 benchmarks/profile_kernels.py --size llama-large \
  --cases fxslots+graphs+kernels=inductor+grads_in_arena=false,fxslots+graphs+kernels=inductor \
  --base fxslots+graphs+kernels=inductor+grads_in_arena=false --out "$OUT/r43" \
  --code-dir "$OUT/r43" 2>&1 | tee "$OUT/r43-kernels.txt" | head -120
echo "t=$(( $(date +%s) - t0 ))"
