# H200 run 32d (torch 2.11): the CPU tests of accumulation and of the stand-in executor under
# torch 2.11 (the autograd node of a forward found in its calling frame; pack hooks that copy),
# then the CUDA suites test_cuda_reliability (saved-tensor hooks that hand back copies) and
# test_deliver_forward.
source benchmarks/gpu_setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_accumulate.py \
  tests/test_graph_executor_cpu.py -o log_level=WARNING 2>&1 | grep -v "torch.__trace" \
  | tail -15 > "$OUT/r32d-cpu-tests-torch211.txt"; tail -3 "$OUT/r32d-cpu-tests-torch211.txt"
cuda_tests r32d 150 tests/test_cuda_reliability.py tests/test_deliver_forward.py
