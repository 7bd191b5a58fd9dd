"""Schedule fuzzer (issue 4, part 1): random models, shape variants and F/B interleavings.

Every run's outputs, input gradients, mutated buffers and accumulated parameter gradients equal
``aot_eager``'s bitwise on CPU (same partitioner, so a difference is fxslots' fault) and eager's
within 1e-5, and every graph applied its plan and took slots (no fallback, unless the case is one
``may_fall_back`` allows). The grammar and the checker live in ``tests/fuzz_models.py``.

Profiles (``FXSLOTS_FUZZ_PROFILE``): ``ci`` (default; fixed seed, a few examples, under a
minute on 2 cores) and ``large`` (random seed, 200 examples, bigger models and schedules).
The GPU profile is ``tests/test_cuda_reliability.py::test_fuzz_cuda``.
"""

from __future__ import annotations

import os

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, note, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.fuzz_models import OPS, Case, HypothesisDraw, check_case, draw_case  # noqa: E402

_COMMON = dict(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("fxslots-fuzz-ci", max_examples=20, derandomize=True, **_COMMON)
settings.register_profile("fxslots-fuzz-large", max_examples=200, derandomize=False, **_COMMON)

PROFILE = os.environ.get("FXSLOTS_FUZZ_PROFILE", "ci")
if PROFILE not in ("ci", "large"):
    raise ValueError(f"FXSLOTS_FUZZ_PROFILE must be 'ci' or 'large', got {PROFILE!r}")
SIZES = {"ci": dict(max_ops=4, max_variants=3, max_schedules=3),
         "large": dict(max_ops=7, max_variants=4, max_schedules=4)}[PROFILE]


def _check(case: Case) -> None:
    # check_case records every warning and fails on a graph that ran without slots, unless
    # the case is one that may (fuzz_models.may_fall_back): numerics alone would not notice.
    check_case(case)


@settings(settings.get_profile(f"fxslots-fuzz-{PROFILE}"))
@given(st.data())
def test_fuzz_schedules_match_aot_eager_bitwise(data):
    case = draw_case(HypothesisDraw(data), **SIZES)
    note(f"repro: python3 -c \"from tests.fuzz_models import *; check_case({case!r})\"")
    _check(case)


# Every op of the grammar at least once in CI, whatever hypothesis draws: fixed cases, each
# with two shape variants, out-of-order backwards, a dropped microbatch and a zero_grad.
_SCHEDULES = (
    (("F", 0, 0), ("F", 1, 1), ("B", 1), ("F", 2, 1), ("B", 0), ("B", 2)),
    (("F", 0, 1), ("B", 0), ("Z",), ("F", 1, 0), ("F", 2, 1), ("D", 1), ("B", 2)),
)
_GROUPS = [OPS[i:i + 5] for i in range(0, len(OPS), 5)]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("ops", _GROUPS, ids=["+".join(g) for g in _GROUPS])
def test_grammar_coverage(ops, dynamic):
    _check(Case(ops=tuple(ops), shapes=((2, 3), (3, 5)), schedules=_SCHEDULES, slots=2,
                dynamic=dynamic, mutate_input=dynamic, two_outputs=not dynamic,
                options=(("debug", True),), seed=7))


def test_every_op_is_covered():
    assert sorted(op for g in _GROUPS for op in g) == sorted(OPS)
