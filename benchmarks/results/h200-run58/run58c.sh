# Run 58c (session 38): run58b.sh without heavy's footprint, for a shorter device budget.
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
cuda_tests_printing r58c 150 tests/test_borrow.py tests/test_share.py tests/test_pool_room.py
cuda_tests r58c 150 tests/test_cuda_reliability.py
