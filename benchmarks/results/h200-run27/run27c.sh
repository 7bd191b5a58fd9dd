#!/usr/bin/env bash
# H200 run 27c: offload="auto" read 1.059x none compiled first (27a) and 1.27x compiled second
# (27b). What it offloaded each time and the link it measured (paired.py now prints both), and
# auto planned for slower links (less offloaded) against none.
source benchmarks/gpu_setup.sh
P="python3 benchmarks/paired.py llama-small sequential"
timeout 80 $P fxslots+offload=auto,fxslots --out "$OUT/r27c-auto-first.json" 2>&1 | tail -4 | tee "$OUT/r27c-auto-first.txt"
timeout 80 $P fxslots,fxslots+offload=auto --out "$OUT/r27c-auto-second.json" 2>&1 | tail -4 | tee "$OUT/r27c-auto-second.txt"
L=fxslots+offload=auto+link_bandwidth
timeout 140 $P $L=4.4e10,$L=3.6e10,$L=2.8e10,$L=2.0e10,fxslots --out "$OUT/r27c-auto-links.json" 2>&1 | tail -7 | tee "$OUT/r27c-auto-links.txt"
