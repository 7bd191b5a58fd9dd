#!/usr/bin/env bash
# H200 run 28a: the post-review form of auto's shape guard (commit at _variant, frame budget,
# declared ranges) on CUDA, then the paired link sweep that 27d timed out on, planned per shape.
source benchmarks/gpu_setup.sh
timeout 150 python3 -m pytest -q -m cuda tests/test_cuda.py tests/test_offload.py -k "offload or auto or link" \
  -p no:cacheprovider 2>&1 | tail -5 | tee "$OUT/r28a-tests.txt"
L=fxslots+offload=auto
timeout 380 python3 benchmarks/paired.py llama-small sequential \
  fxslots,$L,$L+link_bandwidth=4.6e10,$L+link_bandwidth=3.8e10,$L+link_bandwidth=3.0e10 \
  --reps 15 --out "$OUT/r28a-auto.json" 2>&1 | grep -v "captured a CUDA graph" | tail -9 | tee "$OUT/r28a-auto.txt"
python3 - "$OUT/r28a-auto.json" <<'PY' | tee -a "$OUT/r28a-auto.txt"
import json, statistics, sys
r = json.load(open(sys.argv[1])); ms = r["ms_per_step"]
for b in ms:
    q = sorted(a / n for a, n in zip(ms[b], ms["fxslots"], strict=True))
    print(f"{b}: x none {statistics.median(q):.3f} [{q[0]:.3f}-{q[-1]:.3f}]")
PY
