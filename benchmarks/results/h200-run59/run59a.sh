#!/usr/bin/env bash
# Run 59a (session 39): issue 10 on today's code, in one call. The offload part (eager,
# save_on_cpu, fxslots offload none / all / auto / half budget, heavy at 2048 and llama-small at
# 512; last run in full at run 31, before borrowing, the room and memset kernels); the footprint
# of the uniform sequential schedules (llama-small 6 steps, heavy 10), fxslots slots=1 against
# eager; llama-small auto against none, paired. R (the files' prefix), OFFLOAD_S (the offload
# part's limit) and LIMIT (the whole call's) let run59e.sh run it again in less time.
R=${R:-r59a}; OFFLOAD_S=${OFFLOAD_S:-240}; LIMIT=${LIMIT:-585}
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/$R-gpu.txt"
t0=$(date +%s)
timeout $OFFLOAD_S python3 benchmarks/bench.py --parts offload --quick \
  --models heavy,llama-small --budget-s $(( OFFLOAD_S - 15 )) --out /tmp/bench-$R 2>&1 \
  | grep -v "captured a CUDA graph" \
  > "$OUT/$R-offload.txt"; grep "^| " "$OUT/$R-offload.txt"
cp /tmp/bench-$R/*.json "$OUT/" 2>/dev/null
echo "t=$(( $(date +%s) - t0 ))"
for spec in "llama-small 6" "heavy 10"; do
  set -- $spec
  for backend in fxslots eager; do
    timeout 80 python3 benchmarks/footprint.py --model $1 --schedule sequential \
      --backend $backend --options '{"slots": 1}' --steps $2 --out /tmp/fp >> "$OUT/$R-fp.txt" 2>&1
  done
done
grep -E "^model|reserved [0-9]|^graph |^default |allocated at its most" "$OUT/$R-fp.txt"
echo "t=$(( $(date +%s) - t0 ))"
left=$(( LIMIT - $(date +%s) + t0 ))
timeout $left python3 benchmarks/paired.py llama-small sequential fxslots+offload=auto,fxslots \
  --reps 11 --steps 8 --seconds $(( left - 30 )) --out "$OUT/$R-paired.json" 2>&1 \
  | grep -v "captured a CUDA graph" > "$OUT/$R-paired.txt"; tail -10 "$OUT/$R-paired.txt"
echo "t=$(( $(date +%s) - t0 ))"
