#!/usr/bin/env bash
# H200 run 40a, prepared in session 24 for the next session's first call: fxslots' attention
# under kernels="inductor", now one fxslots::<op>_into call that writes its slots
# (passes/lower.py; before, attention kept PyTorch's kernel and a copy there). Then the CUDA
# zoo under Inductor against torch.compile default (39b's floors; expect copy-free near the
# ATen figures, 1.0000, for Llama, T5 and Mixtral).
source benchmarks/gpu_setup.sh
t0=$(date +%s)
FXSLOTS_KERNELS=inductor timeout 200 python3 -m pytest -q -p no:cacheprovider \
  tests/test_attention.py -k "under_cuda_graphs" -rfE --tb=short -o log_level=WARNING \
  > "$OUT/r40a-test_attention-inductor-full.txt" 2>&1
echo "could-not-compile lines: $(grep -c 'could not compile' "$OUT/r40a-test_attention-inductor-full.txt")"
grep -v "torch.__trace" "$OUT/r40a-test_attention-inductor-full.txt" | grep -E "passed|failed|^E |FAILED" \
  | head -12; echo "t=$(( $(date +%s) - t0 ))"
FXSLOTS_KERNELS=inductor timeout 380 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_zoo.py -s -rfE -k "on_cuda_under_cuda_graphs" --tb=short -o log_level=WARNING \
  > "$OUT/r40a-test_zoo-inductor-full.txt" 2>&1
grep -E "on cuda:|passed|failed|^E |FAILED" "$OUT/r40a-test_zoo-inductor-full.txt" | grep -v "^W1" \
  | head -24 | tee "$OUT/r40a-test_zoo-inductor.txt"; echo "t=$(( $(date +%s) - t0 ))"
