"""Run the CPU suite under each torch release fxslots supports, one virtual environment each.

    python3 tools/torch_versions.py                      # 2.11.0 2.12.1 2.14.1 (2.13.0 is CI's)
    python3 tools/torch_versions.py --versions 2.14.1 --pytest-args tests/test_zoo.py

CI runs the suite under torch 2.13.0 only (its CPU wheel lies on the CI machine's disk); the
other releases are CUDA builds of several GB (they run on the CPU all the same), so this is run
by hand when ``fxslots/_torch`` or a release changes. Each environment is made once under
``--venvs`` and reused; fxslots is installed into it editable, so it tests this checkout. Prints
one row per release (the pytest summary line) and writes ``torch_versions.json`` beside them.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ("2.11.0", "2.12.1", "2.14.1")


def _python(venv: Path, version: str) -> Path:
    """The environment's interpreter, with torch ``version`` and fxslots' test extras."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    have = subprocess.run([str(python), "-c", "import torch; print(torch.__version__)"],
                          capture_output=True, text=True).stdout.strip()
    if not have.startswith(version):
        subprocess.run([str(python), "-m", "pip", "install", "-q", f"torch=={version}"],
                       check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", f"{ROOT}[test,plot]"],
                   check=True)
    return python


def _suite(python: Path, pytest_args: list[str]) -> dict:
    start = time.monotonic()
    run = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          *pytest_args], cwd=ROOT, capture_output=True, text=True)
    lines = run.stdout.splitlines()
    summary = next((line for line in reversed(lines) if re.search(r"\d+ (passed|failed)", line)),
                   None) or (run.stderr.strip().splitlines() or ["no summary"])[-1]
    return {"rc": run.returncode, "summary": summary.strip("= "),
            "failed": [line.split(" ")[1] for line in lines if line.startswith("FAILED ")],
            "seconds": round(time.monotonic() - start)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--versions", nargs="+", default=list(DEFAULT))
    ap.add_argument("--venvs", type=Path, default=Path("/tmp/fxslots-torch"))
    ap.add_argument("--pytest-args", nargs="*", default=["-n", "2"])
    args = ap.parse_args(argv)
    results = {}
    for version in args.versions:
        python = _python(args.venvs / f"torch-{version}", version)
        results[version] = _suite(python, args.pytest_args)
        print(f"torch {version:8} rc={results[version]['rc']}  {results[version]['summary']} "
              f"({results[version]['seconds']} s)", flush=True)
        for test in results[version]["failed"]:
            print(f"    FAILED {test}")
    (args.venvs / "torch_versions.json").write_text(json.dumps(results, indent=1))
    return max((r["rc"] for r in results.values()), default=0)


if __name__ == "__main__":
    sys.exit(main())
