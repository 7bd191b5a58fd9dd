#!/usr/bin/env bash
# H200 run 40b (prepared in session 24): where fxslots kernels="inductor" holds more than
# torch.compile default on llama-large sequential (39a: in use 6.58 GiB, steady allocated 5.53,
# warm-up peak 6.51, graph pools 1.04; torch.compile 4.80 everywhere). footprint.py attributes
# the peak's live blocks to allocation sites; inductor is torch.compile's default backend.
source benchmarks/gpu_setup.sh
for b in inductor fxslots; do
  opts='{}'; [ "$b" = fxslots ] && opts='{"kernels": "inductor"}'
  timeout 280 python3 benchmarks/footprint.py --model llama-large --schedule sequential \
    --backend "$b" --options "$opts" --steps 4 --out "$OUT/r40b-footprint-$b" 2>&1 \
    | grep -v "torch.__trace" | tail -40 > "$OUT/r40b-footprint-$b.txt"
  head -60 "$OUT/r40b-footprint-$b.txt"
done
