"""paired.py with DeviceCaps.join_every set to argv[1] seconds on CUDA (run 28f): the
same-session baseline for merged joins (0 = one join per copy, as before)."""
import dataclasses
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import fxslots.backend as backend  # noqa: E402
from fxslots import costs  # noqa: E402

every = float(sys.argv.pop(1))
backend.caps_for = lambda device, link=None, **kw: dataclasses.replace(
    costs.caps_for(device, link, **kw), join_every=every)
sys.argv[0] = "benchmarks/paired.py"
import paired  # noqa: E402

paired.main()
