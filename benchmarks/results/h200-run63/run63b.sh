#!/usr/bin/env bash
# Run 63b (session 43): issue 10's figures (run 59a: the offload part, the uniform footprint,
# llama-small auto against none paired) on today's code, for an H200. OFFLOAD_S and LIMIT, if
# set, reach run59a.sh, which defaults them.
R=r63b bash benchmarks/results/h200-run59/run59a.sh
