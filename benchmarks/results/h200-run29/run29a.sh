#!/usr/bin/env bash
# H200 run 29a: the backward's passes now run while the forward compiles (backward.py), and the
# offload planner's window mend and run-by-run reload walk of session 13 had never run on CUDA.
# test_cuda and the reliability suite, then every CUDA mutant (fresh interpreters).
source benchmarks/gpu_setup.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
cuda_tests r29a 170 tests/test_cuda.py tests/test_cuda_reliability.py
timeout 200 python3 tools/mutation/run.py --suite cuda --markdown 2>&1 | tee "$OUT/r29a-mutants.txt" | tail -14
grep -h "differs from the graph the partitioner" "$OUT"/r29a-*.txt | sort | uniq -c | head -5
