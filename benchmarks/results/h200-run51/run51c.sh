#!/usr/bin/env bash
# Run 51c (torch 2.11): the CUDA suites under kernels="inductor" with memsets="kernels"
# (Inductor's captured graphs: cuDNN attention's memsets remain, its own reductions have none),
# each file with a limit of its own (run 45: test_inductor alone took 169 s); then the host
# memory of a kept cudaGraph_t (kept_graphs.py) and, in the time left (paired.py --seconds),
# run 51b's llama-large pairing: memsets as kernels against nodes against torch.compile default.
source benchmarks/gpu_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r51c-gpu.txt"
t0=$(date +%s)
export FXSLOTS_KERNELS=inductor FXSLOTS_MEMSETS=kernels FXSLOTS_FAILURES_FILE="$OUT/r51c-failures.txt"
cuda_tests r51c 90 tests/test_cuda_memsets.py tests/test_fence.py tests/test_deliver.py \
  tests/test_overlay.py
echo "t=$(( $(date +%s) - t0 ))"
cuda_tests r51c 240 tests/test_inductor.py
unset FXSLOTS_KERNELS FXSLOTS_MEMSETS
echo "t=$(( $(date +%s) - t0 ))"
timeout 40 python3 benchmarks/results/h200-run51/kept_graphs.py 2>&1 | tee "$OUT/r51c-kept.txt"
left=$(( 580 - $(date +%s) + t0 ))
timeout $left python3 benchmarks/paired.py llama-large sequential \
  fxslots+kernels=inductor+memsets=kernels,fxslots+kernels=inductor,inductor \
  --reps 7 --steps 8 --seconds $(( left - 25 )) --out "$OUT/r51c-large.json" 2>&1 \
  | grep -v "captured a CUDA graph" | tee "$OUT/r51c-large.txt" | tail -8
echo "t=$(( $(date +%s) - t0 ))"
# At most 8 files come back from a call: the test outputs go in one archive.
(cd "$OUT" && tar czf r51c-tests.tgz r51c-test_*.txt && rm r51c-test_*.txt)
