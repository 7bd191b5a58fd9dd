# Run 55 (prepared in session 36, not yet run): what session 36 left unmeasured on a GPU.
# 1. fxslots.rowwise's per-process kernel check on CUDA (added after run 54e): test_borrow's
#    CUDA tests, whose end-to-end test fails if the check refuses on CUDA (its temporaries
#    would then differ by 0 bytes, not the log-probabilities' 500 MiB).
# 2. test_cuda (measured_link both ways) and the reliability suite.
# 3. issue 10's auto pair with ATen kernels, on whatever card comes (the issue names the H200).
# 4. llama-large's footprint at one shape against eager, with the softmax backward over the
#    log-probabilities (pool 1758 MiB in run 54e).
source benchmarks/gpu_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 200 python3 -m pytest -q -m cuda tests/test_borrow.py -s -p no:cacheprovider \
  -o log_level=WARNING --timeout 150 -rfE --tb=short 2>&1 | grep -v "torch.__trace" \
  > "$OUT/r55-test_borrow.txt"; grep -E "graph pool|passed|failed|^FAILED|^ERROR" "$OUT/r55-test_borrow.txt"
cuda_tests r55 200 tests/test_cuda.py tests/test_cuda_reliability.py
timeout 240 python3 benchmarks/paired.py llama-small sequential fxslots+offload=auto,fxslots \
  --reps 9 --steps 8 --seconds 200 --out "$OUT/r55-aten.json" 2>&1 | grep -v "torch.__trace" \
  > "$OUT/r55-aten.txt"; tail -8 "$OUT/r55-aten.txt"
