# Run 56 (session 37): the pool's room (SharedPool.make_room) and passes/share.py on CUDA.
# 1. Their CUDA tests, test_borrow's (its pool test sees both), test_cuda and the reliability suite.
source benchmarks/gpu_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 200 python3 -m pytest -q -m cuda tests/test_pool_room.py tests/test_share.py \
  tests/test_borrow.py -s -p no:cacheprovider -o log_level=WARNING --timeout 150 -rfE \
  --tb=short 2>&1 | grep -v "torch.__trace" > "$OUT/r56-tests.txt"
grep -E "room |graph pool|passed|failed|^FAILED|^ERROR" "$OUT/r56-tests.txt"
cuda_tests r56 220 tests/test_cuda.py tests/test_cuda_reliability.py
