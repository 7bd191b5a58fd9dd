"""Run 27b: why a CUDA test failed in 0.5 s when forked from the mutation runner's fork server
(27a), and that it passes in a fresh interpreter: both runs' output tails."""
import sys
from pathlib import Path
sys.path.insert(0, "tools/mutation")
import run


def main() -> None:
    test = ("tests/test_cuda.py::test_offloaded_activations_match_eager_under_replay",)
    for fresh in (False, True):
        rc, out = run.pytest(Path.cwd(), test, 300, fresh=fresh)
        print(f"== fresh={fresh}: exit {rc}")
        keep = [l for l in out.splitlines()
                if l.startswith(("E ", "FAILED", "ERROR")) or "passed" in l or "Error" in l]
        print("\n".join(keep)[:3000])


if __name__ == "__main__":  # the fork server imports __main__ too
    main()
