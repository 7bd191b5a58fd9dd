#!/usr/bin/env bash
# H200 run 27d: offload="auto" now guards a dynamic graph on the sizes it was planned at (27c:
# planned at 256 and run at 512 it moved 148 MiB, 1.27x). Auto compiled second again; then
# auto planned for slower links (fewer bytes), each now planned at its own shapes: the cost
# per offloaded MiB, to size auto's margin; the CUDA offload tests under the guard.
source benchmarks/gpu_setup.sh
P="python3 benchmarks/paired.py llama-small sequential"
timeout 80 $P fxslots,fxslots+offload=auto --out "$OUT/r27d-auto-second.json" 2>&1 | tail -4 | tee "$OUT/r27d-auto-second.txt"
L=fxslots+offload=auto+link_bandwidth
timeout 150 $P $L=4.6e10,$L=3.8e10,$L=3.0e10,$L=2.2e10,fxslots --out "$OUT/r27d-auto-links.json" 2>&1 | tail -7 | tee "$OUT/r27d-auto-links.txt"
timeout 150 python3 -m pytest -q -m cuda tests/test_cuda.py -k "offload or auto or link" -p no:cacheprovider \
  --timeout 120 -rfE --tb=short 2>&1 | grep -v "torch.__trace" | tail -6 > "$OUT/r27d-test_cuda_offload.txt"
tail -2 "$OUT/r27d-test_cuda_offload.txt"
