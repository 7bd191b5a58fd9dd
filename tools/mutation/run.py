"""Apply each mutant of ``mutants.py`` to a copy of the repository and run its tests.

    python3 tools/mutation/run.py                 # every CPU mutant, against its own tests
    python3 tools/mutation/run.py --full          # ... against the whole CPU suite instead
    python3 tools/mutation/run.py --suite cuda    # GPU mutants (on a GPU machine)
    python3 tools/mutation/run.py --only NAME ... # some mutants
    python3 tools/mutation/run.py --list          # the table, nothing run
    python3 tools/mutation/run.py --jobs 1        # one mutant at a time (default: one per core)

The repository (tracked files and untracked ones git does not ignore) is copied to a temporary
directory once; each mutant rewrites one file there, runs ``pytest -x`` on its tests with that
copy first on the path (and on PYTHONPATH, so subprocesses started by the tests import the
mutant too), and puts the file back. Each run is a process forked from a fork server that has
imported torch, Dynamo and pytest once (``PRELOAD``), never fxslots or the tests; a CUDA
mutant's run is a fresh interpreter (``pytest(fresh=True)``). With
``--jobs N`` there are N copies, each running one mutant at a time
(a mutant rewrites a file of its copy, so copies are never shared). First the unmutated copy
runs every selected test: a mutant is only "killed" if its tests pass without it.

Results: "killed" (a test failed; the first one is named), "SURVIVED" (every test passed),
"not run" (a GPU mutant without a GPU: its tests are named all the same, or every test
skipped). Tool errors, never counted as
survivors: "ANCHOR NOT FOUND" / "ANCHOR NOT UNIQUE" (the mutated line changed: update the
mutant), "BAD SELECTION" (pytest found no such test). Exit status: 0 when every mutant that ran
was killed and the tool had no error, 1 when one survived, 2 on a tool error.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

if __package__:
    from .mutants import MUTANTS, Mutant
else:  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from mutants import MUTANTS, Mutant

ROOT = Path(__file__).resolve().parents[2]
FULL_CPU_SUITE = ("tests",)  # README's `python3 -m pytest -q`: the whole suite, cuda skipped
_UNUSED_PLUGINS = ("xdist", "xdist.looponfail", "benchmark", "anyio")


@dataclass
class Outcome:
    mutant: Mutant
    result: str
    killed_by: str = ""
    seconds: float = 0.0
    why: str = ""  # the first "E ..." line of the failure


def copy_repo(dest: Path) -> None:
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT, check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def anchor_problem(copy: Path, m: Mutant) -> str | None:
    path = copy / m.file
    if not path.is_file():
        return f"ANCHOR NOT FOUND (no file {m.file})"
    n = path.read_text().count(m.old)
    return None if n == 1 else ("ANCHOR NOT FOUND" if n == 0 else f"ANCHOR NOT UNIQUE ({n}x)")


# What every mutant's tests import before they reach fxslots: a fork server imports these once
# and each run is forked from it, so ~90 runs do not each pay ~7 s of importing torch. Nothing
# here may import fxslots or the tests (each run must see its own copy), and nothing here runs a
# kernel: a fork after OpenMP's threads start is not safe with libgomp.
PRELOAD = ("pytest", "sympy", "torch", "torch._dynamo", "torch._functorch.aot_autograd",
           "functorch.compile", "torch._inductor.compile_fx", "torch._inductor.scheduler",
           "torch.export", "torch.utils.checkpoint", "torch.distributed.pipelining",
           "expecttest", "hypothesis")
_WRONG_IMPORT = 97
_forks = None  # the multiprocessing context whose fork server holds PRELOAD


def _fork_context():
    global _forks
    if _forks is None:
        import multiprocessing

        _forks = multiprocessing.get_context("forkserver")
        _forks.set_forkserver_preload(["__main__", *PRELOAD])
    return _forks


def _pytest_args(tests: tuple[str, ...]) -> list[str]:
    # Plugins no mutant's tests use stay unloaded.
    return ["-q", "-x", "-rfE", "-p", "no:cacheprovider",
            *(a for name in _UNUSED_PLUGINS for a in ("-p", f"no:{name}")), *tests]


def _pytest_in_fork(copy: str, args: list[str], log: str) -> None:
    """The body of one forked run: the copy's fxslots and tests, output to ``log``."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.chdir(copy)
    sys.path.insert(0, copy)
    # Subprocesses the tests start import the mutant too; a stale .pyc of a rewritten file of
    # the same size and second would hide the mutant.
    os.environ["PYTHONPATH"] = _path_first(copy)
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    sys.dont_write_bytecode = True
    import pytest as _pytest

    code = int(_pytest.main(args))
    wrong = _wrong_import(getattr(sys.modules.get("fxslots"), "__file__", None), copy)
    if wrong:  # then nothing this run says counts
        print(wrong)
        code = _WRONG_IMPORT
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)  # multiprocessing's exit runs the finalizers (pools the tests left open)


def _path_first(copy: str) -> str:
    """PYTHONPATH with ``copy`` first."""
    return os.pathsep.join(
        [copy] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])


def _wrong_import(where: str | None, copy: str) -> str | None:
    """Why a run whose tests imported fxslots from ``where`` (None: not at all) tells nothing
    of ``copy``'s mutant, or None. With a separator: the copy repo1 must not accept repo10's."""
    if where is None or where.startswith(os.path.join(copy, "")):
        return None
    return f"mutation: the tests imported fxslots from {where!r}, not {copy}"


def pytest(copy: Path, tests: tuple[str, ...], timeout: float,
           fresh: bool = False) -> tuple[int, str]:
    """pytest's exit status (negative: killed by that signal; -1: timed out) and output.
    ``fresh``: in a new interpreter, not a fork (the CUDA mutants: CUDA in a forked child of
    the server is not what users run, and only eight mutants pay for the start)."""
    if fresh:
        return _pytest_fresh(copy, tests, timeout)
    log = copy.parent / f"{copy.name}.log"
    proc = _fork_context().Process(target=_pytest_in_fork,
                                   args=(str(copy), _pytest_args(tests), str(log)))
    proc.start()
    proc.join(timeout)
    if proc.exitcode is None:
        proc.kill()
        proc.join()
        return -1, log.read_text(errors="replace")
    out = log.read_text(errors="replace")
    if proc.exitcode == _WRONG_IMPORT:
        sys.exit(out.strip().splitlines()[-1])
    return proc.exitcode, out


# A fresh run's body: pytest, then where fxslots came from (checked as a forked run checks it).
_FRESH = ("import sys, pytest; code = int(pytest.main(sys.argv[1:])); "
          "m = sys.modules.get('fxslots'); "
          "print('mutation: fxslots from', getattr(m, '__file__', None)); sys.exit(code)")


def _pytest_fresh(copy: Path, tests: tuple[str, ...], timeout: float) -> tuple[int, str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=_path_first(str(copy)))
    # Its own session, so a timeout kills what the tests started too.
    proc = subprocess.Popen([sys.executable, "-c", _FRESH, *_pytest_args(tests)], cwd=copy,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        return -1, proc.communicate()[0] or ""
    where = re.search(r"^mutation: fxslots from (.*)$", out, re.M)
    wrong = where and _wrong_import(None if where[1] == "None" else where[1], str(copy))
    if wrong:
        sys.exit(wrong)
    return proc.returncode, out


def classify(rc: int, out: str) -> tuple[str, str]:
    """(result, first failing test) from pytest's exit status and output."""
    if rc == -1:
        return "killed", "(timed out)"
    if rc < 0:  # a signal: faulthandler printed the crashing test's frame, innermost first
        frame = re.search(r'File "[^"]*/(tests/[^"]+\.py)", line \d+ in (test_\w+)', out)
        where = f"{frame.group(1)}::{frame.group(2)}" if frame else "a test"
        return "killed", f"{where} (crashed: signal {-rc})"
    if rc in (4, 5) or "ERROR: not found" in out:
        return "BAD SELECTION", out.strip().splitlines()[-1] if out.strip() else ""
    failed = re.search(r"^(?:FAILED|ERROR) (\S+)", out, re.M)
    if rc == 0:
        ran = re.search(r"(\d+) passed", out)
        return ("SURVIVED", "") if ran else ("not run", "every test skipped")
    return "killed", failed.group(1) if failed else f"(pytest exit {rc})"


def _cuda_in_fork() -> None:
    import torch

    os._exit(0 if torch.cuda.is_available() else 1)


def has_gpu() -> bool:
    proc = _fork_context().Process(target=_cuda_in_fork)
    proc.start()
    proc.join()
    return proc.exitcode == 0


def run_one(copy: Path, m: Mutant, tests: tuple[str, ...], timeout: float) -> Outcome:
    path = copy / m.file
    original = path.read_text()
    path.write_text(original.replace(m.old, m.new, 1))
    start = time.monotonic()
    try:
        rc, out = pytest(copy, tests, timeout, fresh=m.suite == "cuda")
    finally:
        path.write_text(original)
    result, by = classify(rc, out)
    why = next((line[1:].strip() for line in out.splitlines() if line.startswith("E ")), "")
    return Outcome(m, result, by, time.monotonic() - start, why[:160])


def table(outcomes: list[Outcome], markdown: bool) -> str:
    if markdown:  # for docs/reliability.md: with the failure's first line, without times
        head = ("mutant", "rule", "suite", "result", "killed by", "how it failed")
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for o in outcomes:
            why = o.why.replace("|", "\\|")[:110]
            cells = (f"`{o.mutant.name}`", o.mutant.rule, o.mutant.suite, o.result,
                     f"`{o.killed_by}`" if o.killed_by.startswith("tests/") else o.killed_by,
                     f"`{why}`" if why else "")
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)
    head = ("mutant", "rule", "suite", "result", "killed by", "time")
    rows = [(o.mutant.name, o.mutant.rule, o.mutant.suite, o.result, o.killed_by,
             f"{o.seconds:.0f}s" if o.seconds else "") for o in outcomes]
    widths = [min(max(len(str(r[i])) for r in rows + [head]), 70) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(fmt.format(*(str(c)[:70] for c in r)) for r in [head] + rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=["cpu", "cuda", "all"], default="cpu")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run these mutants only")
    ap.add_argument("--full", action="store_true",
                    help="run the whole CPU suite (README's command) against each mutant")
    ap.add_argument("--list", action="store_true", help="print the mutants and exit")
    ap.add_argument("--markdown", action="store_true", help="print the table as markdown")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip the unmutated run of the selected tests")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per pytest run")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                    help="mutants run at once, each in its own copy (default: min(2, cores))")
    args = ap.parse_args(argv)

    chosen = [m for m in MUTANTS if args.suite in ("all", m.suite)]
    if args.only:
        unknown = set(args.only) - {m.name for m in MUTANTS}
        if unknown:
            ap.error(f"no mutant named {sorted(unknown)}")
        chosen = [m for m in MUTANTS if m.name in args.only]
    if args.list:
        print(table([Outcome(m, "", ", ".join(m.tests)) for m in chosen], args.markdown))
        return 0
    gpu = has_gpu()
    with tempfile.TemporaryDirectory(prefix="fxslots-mutation-") as tmp:
        copies = [Path(tmp) / f"repo{i}" for i in range(max(1, args.jobs))]
        for copy in copies:
            copy_repo(copy)
        return _run_all(copies, chosen, gpu, args)


def _selection(m: Mutant, full: bool) -> tuple[str, ...]:
    return FULL_CPU_SUITE if full and m.suite == "cpu" else m.tests


def _run_all(copies: list[Path], chosen: list[Mutant], gpu: bool, args) -> int:
    outcomes: list[Outcome] = []
    runnable = []
    for m in chosen:
        problem = anchor_problem(copies[0], m)
        if problem:
            outcomes.append(Outcome(m, problem))
        elif m.suite == "cuda" and not gpu:
            # Named all the same: the tests the lead runs this mutant against on the GPU.
            outcomes.append(Outcome(m, "not run (needs a GPU)", ", ".join(m.tests)))
        else:
            runnable.append(m)
    if runnable and not args.no_baseline:
        tests = tuple(dict.fromkeys(t for m in runnable for t in _selection(m, args.full)))
        print(f"baseline: {len(tests)} test selections on the unmutated copy ...", flush=True)
        rc, out = pytest(copies[0], tests, args.timeout * 4,
                         fresh=any(m.suite == "cuda" for m in runnable))
        if rc != 0:
            print(out[-4000:])
            sys.exit("mutation: the unmutated copy fails its tests; fix the suite first")
    outcomes += _run_mutants(copies, runnable, args)
    order = {m.name: i for i, m in enumerate(MUTANTS)}
    outcomes.sort(key=lambda o: order[o.mutant.name])
    print()
    print(table(outcomes, args.markdown))
    errors = [o for o in outcomes if o.result.isupper() and o.result != "SURVIVED"]
    survived = [o for o in outcomes if o.result == "SURVIVED"]
    killed = sum(o.result == "killed" for o in outcomes)
    print(f"\n{killed} killed, {len(survived)} survived, {len(errors)} tool errors, "
          f"{sum(o.result.startswith('not run') for o in outcomes)} not run")
    return 2 if errors else 1 if survived else 0


def _run_mutants(copies: list[Path], runnable: list[Mutant], args) -> list[Outcome]:
    free = list(copies)  # each worker takes a copy for one mutant and gives it back

    def one(m: Mutant) -> Outcome:
        copy = free.pop()
        try:
            o = run_one(copy, m, _selection(m, args.full), args.timeout)
        finally:
            free.append(copy)
        why = f"\n    {o.why}" if o.why else ""
        print(f"{m.name} ... {o.result} {o.killed_by} ({o.seconds:.0f}s){why}", flush=True)
        return o

    with ThreadPoolExecutor(max_workers=len(copies)) as pool:
        return list(pool.map(one, runnable))


if __name__ == "__main__":
    sys.exit(main())
