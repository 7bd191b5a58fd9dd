#!/usr/bin/env bash
# Run 59e (session 39): run 59a again, for an H200 (issue 10 names that card), in the device
# time that was left.
R=r59e OFFLOAD_S=200 LIMIT=330 bash benchmarks/results/h200-run59/run59a.sh
