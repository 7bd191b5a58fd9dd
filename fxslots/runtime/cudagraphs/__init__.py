"""CUDA graph execution: the shared pool, captures, and the executor that replays them."""
