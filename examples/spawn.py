"""Run a function in N fresh processes (torch.multiprocessing, spawn), one per rank, meeting at
a free local TCP port; fail, with every rank's error, when one fails or the time runs out."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import torch.multiprocessing as mp


def free_port() -> int:
    """A TCP port nobody listens on now (the OS picks it; another process could take it before
    rank 0 binds it, which init_process_group would report)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(fn: Callable[..., Any], world: int, *args: Any, timeout_s: float = 300) -> None:
    """``fn(rank, world, port, *args)`` in ``world`` spawned processes; raises if one fails
    (torch.multiprocessing's ProcessRaisedException carries its traceback) or if they have not
    all finished within ``timeout_s`` (then every one still running is killed)."""
    port = free_port()
    ctx = mp.start_processes(fn, args=(world, port, *args), nprocs=world, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + timeout_s
    try:
        while not ctx.join(timeout=max(1.0, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{getattr(fn, '__name__', fn)} did not finish on {world} "
                                   f"ranks within {timeout_s:.0f} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
                p.join(5)
