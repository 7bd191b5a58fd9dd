#!/usr/bin/env bash
# H200 run 27e: 27d's paired runs timed out (80 s was too short once auto compiles each new
# largest shape); one run, none compiled first, then auto and auto for a slower link.
source benchmarks/gpu_setup.sh
L=fxslots+offload=auto
timeout 250 python3 benchmarks/paired.py llama-small sequential fxslots,$L,$L+link_bandwidth=3.6e10 \
  --reps 15 --out "$OUT/r27e-auto.json" 2>&1 | grep -v "captured a CUDA graph" | tail -7 | tee "$OUT/r27e-auto.txt"
python3 - "$OUT/r27e-auto.json" <<'PY' | tee -a "$OUT/r27e-auto.txt"
import json, statistics, sys
r = json.load(open(sys.argv[1])); ms = r["ms_per_step"]
for b in ms:
    q = sorted(a / n for a, n in zip(ms[b], ms["fxslots"]))
    print(f"{b}: x none {statistics.median(q):.3f} [{q[0]:.3f}-{q[-1]:.3f}]")
PY
