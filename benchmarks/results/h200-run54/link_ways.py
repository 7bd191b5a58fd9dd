"""Run 54 probe: the host link both ways, window by window, and what ``costs.measured_link``
plans with (the slower way's best window). Run it in several processes: run 52a read one
window at 43.9 and 35.8 GB/s in two processes on one H100.

    python3 benchmarks/results/h200-run54/link_ways.py
"""

import torch

from fxslots import costs


def windows(dst: torch.Tensor, src: torch.Tensor, n: int = 8) -> list[float]:
    """GB/s of each of ``n`` timed copies, as ``costs.measured_link`` times them."""
    return [src.nbytes / s / 1e9 for s in costs.copy_seconds(dst, src, n)]


def main() -> None:
    link = costs.measured_link(torch.device("cuda"))
    host = torch.empty(64 * 2**20, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty_like(host, device="cuda")
    for way, (dst, src) in {"to the device": (dev, host), "to the host": (host, dev)}.items():
        print(f"{way:14s} GB/s: " + " ".join(f"{r:.1f}" for r in windows(dst, src)))
    print(f"measured_link: {link / 1e9:.2f} GB/s")


if __name__ == "__main__":
    main()
