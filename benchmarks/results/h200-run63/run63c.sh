#!/usr/bin/env bash
# Run 63c (session 43): the mutant `recovery-leaves-generators-capturing`, retargeted at
# end_rng_capture's registration (62b: the pool probe's never runs its capture on torch 2.11),
# against both of its tests; then, on an H200, run 63b (issue 10's figures) in the time left of
# CALL_S seconds.
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r63c-gpu.txt"
t0=$(date +%s)
timeout 150 python3 tools/mutation/run.py --suite cuda --markdown \
  --only recovery-leaves-generators-capturing > "$OUT/r63c-mutants.txt" 2>&1
echo "mutants rc=$?"; tail -6 "$OUT/r63c-mutants.txt"
echo "t=$(( $(date +%s) - t0 ))"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && (( ${CALL_S:-590} - $(date +%s) + t0 > 150 )); then
  left=$(( ${CALL_S:-590} - $(date +%s) + t0 ))
  LIMIT=$left OFFLOAD_S=$(( left < 210 ? left - 10 : 200 )) bash benchmarks/results/h200-run63/run63b.sh
fi
