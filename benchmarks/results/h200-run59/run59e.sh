#!/usr/bin/env bash
# Run 59e (session 39): run 59a again, for an H200 (issue 10 names that card). The offload
# part (eager, save_on_cpu, fxslots offload none / all / auto / half budget, heavy at 2048 and llama-small at
# 512; last run in full at run 31, before borrowing, the room and memset kernels); the footprint
# of the uniform sequential schedules (llama-small 6 steps, heavy 10), fxslots slots=1 against
# eager; llama-small auto against none, paired.
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r59e-gpu.txt"
t0=$(date +%s)
timeout 200 python3 benchmarks/bench.py --parts offload --quick --models heavy,llama-small \
  --budget-s 185 --out /tmp/bench-r59e 2>&1 | grep -v "captured a CUDA graph" \
  > "$OUT/r59e-offload.txt"; grep "^| " "$OUT/r59e-offload.txt"
cp /tmp/bench-r59e/*.json "$OUT/" 2>/dev/null
echo "t=$(( $(date +%s) - t0 ))"
for spec in "llama-small 6" "heavy 10"; do
  set -- $spec
  for backend in fxslots eager; do
    timeout 80 python3 benchmarks/footprint.py --model $1 --schedule sequential \
      --backend $backend --options '{"slots": 1}' --steps $2 --out /tmp/fp >> "$OUT/r59e-fp.txt" 2>&1
  done
done
grep -E "^model|reserved [0-9]|^graph |^default |allocated at its most" "$OUT/r59e-fp.txt"
echo "t=$(( $(date +%s) - t0 ))"
left=$(( 330 - $(date +%s) + t0 ))
timeout $left python3 benchmarks/paired.py llama-small sequential fxslots+offload=auto,fxslots \
  --reps 11 --steps 8 --seconds $(( left - 30 )) --out "$OUT/r59e-paired.json" 2>&1 \
  | grep -v "captured a CUDA graph" > "$OUT/r59e-paired.txt"; tail -10 "$OUT/r59e-paired.txt"
echo "t=$(( $(date +%s) - t0 ))"
