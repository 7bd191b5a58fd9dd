# Run 54e: the softmax backward over the log-probabilities (ROWWISE), on CUDA kernels and in
# captured graphs, then llama-large's graph pool at one shape.
source benchmarks/gpu_setup.sh
timeout 150 python3 -m pytest -q -m cuda tests/test_borrow.py -s -p no:cacheprovider \
  -o log_level=WARNING --timeout 120 -rfE --tb=short 2>&1 | grep -v "torch.__trace" \
  > "$OUT/r54e-test_borrow.txt"; grep -E "graph pool|passed|failed|^FAILED|^ERROR" "$OUT/r54e-test_borrow.txt"
timeout 60 python3 benchmarks/results/h200-run30/capture_pools.py llama-large sequential \
  '{"slots": 1}' 2048 > "$OUT/r54e-pools-large.txt" 2>&1; grep -E "^capture|^graph pool" "$OUT/r54e-pools-large.txt"
