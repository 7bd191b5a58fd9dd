#!/usr/bin/env bash
# H200 run 42a (prepared in session 26, no device lent that session). Supersedes run 41a.
# 1. llama-large sequential and accum under kernels="inductor": torch.compile default, fxslots
#    with gradients in the arena (session 26: fenced Inductor code, passes/fence.py) and with
#    grads_in_arena=False (the output buffer, as in run 40e). Expect the arena variant's steady
#    peak near torch.compile's 4.80 GiB (40b: 5.53 with the buffer), its warm-up peak near its
#    steady one (session 25's delivery.warm_up change), and its ms/step within noise of the
#    buffer variant's (fences may keep Inductor from fusing a value pending on a dead tensor).
# 2. The CUDA arena, fence, delivery and accumulation tests under Inductor.
source benchmarks/gpu_setup.sh
t0=$(date +%s)
timeout 300 python3 benchmarks/bench.py --parts speed --models llama-large \
  --schedules sequential,accum --cases inductor,fxslots \
  --fxslots-variants '[{"kernels": "inductor"}, {"kernels": "inductor", "grads_in_arena": false}]' \
  --reps 3 --steps 8 --case-timeout-s 120 --out "$OUT/r42a" 2>&1 \
  | grep -E "^\[speed|^\| llama" | tee "$OUT/r42a-bench.txt"
echo "t=$(( $(date +%s) - t0 ))"
FXSLOTS_KERNELS=inductor timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_overlay.py tests/test_fence.py tests/test_cuda.py tests/test_deliver.py \
  tests/test_accumulate.py -rfE --tb=short -o log_level=WARNING 2>&1 \
  | grep -v "torch.__trace" > "$OUT/r42a-cuda-inductor.txt"
grep -E "passed|failed|^FAILED|^E " "$OUT/r42a-cuda-inductor.txt" | head -20
echo "t=$(( $(date +%s) - t0 ))"
