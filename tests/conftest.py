import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _fresh_compile_state():
    import fxslots

    fxslots.reset()
    yield
    fxslots.reset()


def pytest_runtest_logreport(report):
    # On the GPU machine a run can be cut off by its time limit before pytest prints its
    # summary; FXSLOTS_FAILURES_FILE receives each failure the moment it happens.
    path = os.environ.get("FXSLOTS_FAILURES_FILE")
    if path and report.failed:
        with open(path, "a") as f:
            f.write(f"==== {report.nodeid} ({report.when}, {report.duration:.1f}s)\n")
            f.write(report.longreprtext[-6000:] + "\n")
