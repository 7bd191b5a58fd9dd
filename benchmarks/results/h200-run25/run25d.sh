#!/usr/bin/env bash
# H200 run 25d: what the CUDA zoo copies, group by group (issue 11, after the fill and pad
# routes), and where accum's host time goes (issue 12).
source benchmarks/gpu_setup.sh
timeout 60 python3 benchmarks/results/h200-run25/accum_parts.py 2>&1 | grep -v "^fxslots: v" | tee "$OUT/r25d-accum-parts.txt"
timeout 240 python3 benchmarks/results/h200-run25/zoo_copied.py bf16 2>&1 | grep -v "^fxslots: v\|Warning\|warn\|exc.py" > "$OUT/r25d-zoo-copied.txt"; cat "$OUT/r25d-zoo-copied.txt"
