#!/usr/bin/env bash
# Run 63a (session 43): issue 13's compute-bound table (run 59b: llama-large sequential, accum,
# 1F1B x eager, torch.compile default, reduce-overhead, fxslots ATen and Inductor kernels) on
# today's code, for an H200: every run since 47 came on an H100 and the issue names the H200.
R=${R:-r63a} bash benchmarks/results/h200-run59/run59b.sh
