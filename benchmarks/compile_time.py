"""First-compile time of fxslots against aot_eager on the model zoo (tests/zoo.py), on CPU.

For each model and shape mode, each backend compiles the model afresh and runs its first
training step (forward and backward of one batch); on these tiny models that step is almost
all compile time. Backends alternate and the best of --repeat runs counts, because compile
times on a shared machine are noisy. Prints a table and writes JSON.

    python3 benchmarks/compile_time.py                       # every model, static and dynamic
    python3 benchmarks/compile_time.py --models t5,conv --repeat 5 --out /tmp/ct.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import fxslots  # noqa: E402
from tests import zoo  # noqa: E402

BACKENDS = ("aot_eager", "fxslots")


def first_step(family: str, backend: str, dynamic: bool) -> float:
    """Seconds for a fresh compile's first forward and backward."""
    fxslots.reset()
    model = zoo.build(family)
    x = zoo.inputs(family)[0]
    f = torch.compile(model, backend=backend, dynamic=dynamic)
    t0 = time.perf_counter()
    f(x).float().square().mean().backward()
    return time.perf_counter() - t0


def measure(families: list[str], repeat: int) -> list[dict]:
    rows = []
    for family in families:
        for dynamic in (False, True):
            best = {b: float("inf") for b in BACKENDS}
            for _ in range(repeat):
                for b in BACKENDS:
                    best[b] = min(best[b], first_step(family, b, dynamic))
            rows.append({"model": family, "shapes": "dynamic" if dynamic else "static",
                         "aot_eager_s": round(best["aot_eager"], 2),
                         "fxslots_s": round(best["fxslots"], 2),
                         "ratio": round(best["fxslots"] / best["aot_eager"], 2)})
            print(_row(rows[-1]), flush=True)
    return rows


def _row(r: dict) -> str:
    return (f"| {r['model']:<8} | {r['shapes']:<7} | {r['aot_eager_s']:>11.2f} | "
            f"{r['fxslots_s']:>9.2f} | {r['ratio']:>5.2f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join((*zoo.FAMILIES, "conv")))
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                 "compile_time.json"))
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    print("| model    | shapes  | aot_eager s | fxslots s | ratio |")
    print("|----------|---------|-------------|-----------|-------|")
    rows = measure(args.models.split(","), args.repeat)
    with open(args.out, "w") as f:
        json.dump({"torch": torch.__version__, "threads": torch.get_num_threads(),
                   "repeat": args.repeat, "rows": rows}, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
