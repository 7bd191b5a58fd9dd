#!/usr/bin/env bash
# Run 60d (session 40): 60c's transformers cases again (the zoo now enables checkpointing
# under the GPU machine's transformers too), and the zoo's CUDA tests.
source benchmarks/gpu_setup.sh
export PYTHONPATH=.:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/r60d-gpu.txt"
python3 -c "import transformers; print('transformers', transformers.__version__)"
t0=$(date +%s)
cuda_tests_printing r60d ${LIMIT:-400} tests/test_cuda_checkpointed_rng.py tests/test_zoo.py
echo "t=$(( $(date +%s) - t0 ))"
