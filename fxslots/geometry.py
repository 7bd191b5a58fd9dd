"""Byte geometry of strided tensors, in one home.

Sizes, strides and offsets are ints or sympy expressions over shape symbols; every helper here
takes both and keeps the kind it was given (ints in, an int out), so the runtime's concrete
layouts and the planner's symbolic ones share one definition. Imports torch and sympy only.
"""

from __future__ import annotations

import functools
import itertools
from typing import Iterable, Iterator, Mapping, Sequence

import sympy
import torch

Number = int | sympy.Expr

# Dynamo specializes sizes 0 and 1, so a shape symbol is at least 2.
_LOWEST_SYMBOL_VALUE = 2
# The value an unbounded symbol takes as its "high" point: large enough to expose layouts
# that change with size, small enough to keep every evaluation cheap.
UNBOUNDED_SYMBOL_VALUE = 4096


def itemsize(dtype: torch.dtype) -> int:
    """Bytes per element of ``dtype``."""
    return dtype.itemsize


def _symbolic(xs: Iterable[Number]) -> bool:
    return any(isinstance(x, sympy.Basic) for x in xs)


def span_elements(shape: Sequence[Number], stride: Sequence[Number]) -> Number:
    """Elements from a strided tensor's first addressed element to its last, inclusive (0 when
    it is empty). Ints give an int; sympy sizes give an expression."""
    symbolic = _symbolic((*shape, *stride))
    if any(s == 0 for s in shape):
        return sympy.Integer(0) if symbolic else 0
    total: Number = sympy.Integer(1) if symbolic else 1
    for n, s in zip(shape, stride, strict=True):
        total = total + (n - 1) * s
    # Expanded, a contiguous span is the plain product again (s0*s1, not 1 + (s0 - 1)*s1 +
    # s1 - 1): a canonical polynomial, cheap to build, and every sum and printout of it later
    # stays short.
    return sympy.expand(total) if symbolic else total


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides of ``shape`` (a size-0 dimension counts as 1, as torch does)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def grad_strides(param: torch.Tensor) -> tuple[int, ...]:
    """The strides autograd's ``AccumulateGrad`` gives a parameter's ``.grad`` (its layout
    contract): the parameter's own where it is dense and non-overlapping, else row-major."""
    shape, stride = tuple(param.shape), tuple(param.stride())
    if not all(isinstance(x, int) for x in (*shape, *stride)):
        return contiguous_strides(shape)  # a parameter of symbolic size: not met in practice
    reach = 1  # dense and non-overlapping: sorted by stride, each is the product of those below
    for st, n in sorted((st, n) for n, st in zip(shape, stride, strict=True) if n != 1):
        if st != reach:
            return contiguous_strides(shape)
        reach *= n
    return stride


def obeys_grad_layout(param: torch.Tensor, grad: torch.Tensor) -> bool:
    """Whether ``grad`` has ``grad_strides(param)`` (in every dimension of size other than
    1, where a stride means nothing: autograd compares them so)."""
    return all(n == 1 or a == b for n, a, b in zip(grad.shape, grad.stride(),
                                                     grad_strides(param), strict=True))


def row_major(shape: Sequence[Number], stride: Sequence[Number]) -> bool:
    """Whether ``stride`` is row-major for ``shape``, as expressions: for symbolic sizes, at
    every shape. A size-1 dimension's stride is free, as torch's contiguity has it."""
    step: Number = 1
    for size, st in zip(reversed(shape), reversed(stride), strict=True):
        if size != 1 and sympy.expand(st - step) != 0:
            return False
        step = step * size
    return True


def compact_elements(shape: Sequence[Number], stride: Sequence[Number]) -> Number:
    """Elements a copy of the tensor moves: stride-0 (expanded) dimensions count once."""
    total: Number = sympy.Integer(1) if _symbolic((*shape, *stride)) else 1
    for n, s in zip(shape, stride, strict=True):
        if s != 0:
            total = total * n
    return total


@functools.lru_cache(maxsize=4096)
def _align_symbolic(nbytes: sympy.Expr, alignment: int) -> sympy.Expr:
    return alignment * sympy.ceiling(nbytes / alignment)


def align_up(nbytes: Number, alignment: int) -> Number:
    """Round ``nbytes`` up to a multiple of ``alignment``; stays exact when symbolic (cached:
    a layer stack asks for the same sizes over and over)."""
    if isinstance(nbytes, int):
        return -(-nbytes // alignment) * alignment
    if nbytes.is_Integer:
        return sympy.Integer(-(-int(nbytes) // alignment) * alignment)
    return _align_symbolic(nbytes, alignment)


def member_byte_offset(placement_offset: Number, storage_start: Number,
                       storage_offset: Number, dtype: torch.dtype) -> Number:
    """Arena byte where a member of a placed storage starts: the placement's offset plus the
    member's distance from the first storage byte the placement holds (``storage_start``).
    ``storage_offset`` is in elements of ``dtype``, absolute in the storage."""
    return placement_offset + storage_offset * itemsize(dtype) - storage_start


def evaluate(e: Number, env: Mapping[sympy.Symbol, int]) -> int:
    """The integer value of ``e`` once its symbols are bound."""
    if isinstance(e, int):
        return e
    if e.is_Integer:
        return int(e)
    v = e.xreplace({s: sympy.Integer(env[s]) for s in e.free_symbols})
    if not v.is_Integer:
        raise ValueError(f"fxslots: {e} did not evaluate to an integer under {dict(env)}: {v}")
    return int(v)


Ranges = Mapping[sympy.Symbol, tuple[int, "int | None"]]


_PIN_SEARCH = 512  # how far above its lower bound a size a guard pins is looked for

# Each point and its neighbour inward: one of two sizes survives a guard such as "even".
_NEIGHBOURED = ("low", "low+1", "mid", "mid+1", "high-1", "high")
_NEIGHBOURS = {"low+1": ("low", 1), "mid+1": ("mid", 1), "high-1": ("high", -1)}


def _point(lo: int, hi: int | None, point: str, unbounded: int | None) -> int | None:
    lo = max(lo, _LOWEST_SYMBOL_VALUE)
    top = hi if hi is not None else (None if unbounded is None else max(lo, unbounded))
    point, step = _NEIGHBOURS.get(point, (point, 0))
    if point == "low":
        value = lo
    elif point == "mid":
        value = lo + 7 if top is None else min(top, lo + 7)
    elif top is None:
        return None
    else:
        value = top
    if not step:
        return value
    value = max(value + step, lo)  # a neighbour stays inside the range
    return value if top is None else min(value, top)


def symbol_values(ranges: Ranges, symbols: Iterable[sympy.Symbol] | None = None, *,
                  points: Sequence[str] = ("low", "mid", "high"), limit: int = 64,
                  unbounded: int | None = UNBOUNDED_SYMBOL_VALUE) -> Iterator[dict]:
    """Concrete values to evaluate symbolic sizes at: every combination of each symbol at the
    chosen ``points`` of its range ("low": its lower bound, at least 2; "mid": 7 above it;
    "high": its upper bound, else ``unbounded``), at most ``limit`` of them. Yields nothing
    when a symbol has no upper bound and ``unbounded`` is None. A symbol without a range
    counts as unbounded above 2."""
    syms = sorted(ranges if symbols is None else symbols, key=str)
    choices = []
    for s in syms:
        values = _values_of(ranges, s, points, unbounded)
        if values is None:
            return
        choices.append([(s, v) for v in values])
    for combo in itertools.islice(itertools.product(*choices), limit):
        yield dict(combo)


def _values_of(ranges: Ranges, s: sympy.Symbol, points: Sequence[str],
               unbounded: int | None) -> list[int] | None:
    """``s``'s values at ``points`` of its range, or None where one has no value."""
    lo, hi = ranges.get(s, (_LOWEST_SYMBOL_VALUE, None))
    values = {_point(lo, hi, p, unbounded) for p in points}
    return None if None in values else sorted(values)


def _holds(guards: Iterable[sympy.Basic], env: Mapping[sympy.Symbol, int]) -> bool:
    """Whether ``guards`` allow the sizes ``env``. Only a guard that evaluates to false rules
    them out: one sympy cannot decide (an opaque function of the sizes) does not."""
    values = {k: sympy.Integer(v) for k, v in env.items()}
    return all(g.xreplace(values) is not sympy.false for g in guards)


def guarded_symbol_values(ranges: Ranges, symbols: Iterable[sympy.Symbol],
                          guards: Sequence[sympy.Basic], limit: int = 64) -> Iterator[dict]:
    """``symbol_values``' samples, each point and the value above it, kept where Dynamo's
    ``guards`` hold: a graph that split a size in two never runs at an odd one, and checking it
    there fails for nothing. When no sample satisfies them, the unfiltered samples."""
    syms = set(symbols)
    guards = [g for g in guards if g.free_symbols <= syms]
    if not guards:
        yield from symbol_values(ranges, syms, limit=limit)
        return
    found = 0
    for env in symbol_values(ranges, syms, limit=limit * 8, points=_NEIGHBOURED):
        if _holds(guards, env):
            found += 1
            yield env
            if found == limit:
                return
    if not found:
        pinned = list(_pinned_samples(ranges, syms, guards, limit))
        yield from pinned or symbol_values(ranges, syms, limit=limit)


def _pinned_samples(ranges: Ranges, syms: set[sympy.Symbol], guards: list[sympy.Basic],
                    limit: int) -> Iterator[dict]:
    """Samples for guards that pin a size no sample point meets (``Eq(2*(s//2), 8)``, a
    view that fixed ``s`` at 8 without Dynamo making it a constant): each symbol with guards
    of its own takes the first two values from its lower bound they allow, the others their
    usual points; kept where every guard holds."""
    choices = []
    for s in sorted(syms, key=str):
        own = [g for g in guards if g.free_symbols == {s}]
        if not own:
            choices.append([(s, v) for v in _values_of(ranges, s, ("low", "mid", "high"),
                                                       UNBOUNDED_SYMBOL_VALUE)])
            continue
        lo, hi = ranges.get(s, (_LOWEST_SYMBOL_VALUE, None))
        start = max(lo, _LOWEST_SYMBOL_VALUE)
        top = start + _PIN_SEARCH if hi is None else min(hi, start + _PIN_SEARCH)
        allowed = (v for v in range(start, top + 1) if _holds(own, {s: v}))
        values = list(itertools.islice(allowed, 2))
        if not values:
            return
        choices.append([(s, v) for v in values])
    for combo in itertools.islice(itertools.product(*choices), limit):
        if _holds(guards, dict(combo)):
            yield dict(combo)


def upper_bound(e: Number, ranges: Ranges) -> int | None:
    """The value of ``e`` with each symbol at its upper bound (sizes grow with their
    symbols), or None when a symbol is unbounded."""
    if isinstance(e, int) or e.is_Integer:
        return int(e)
    env = next(symbol_values(ranges, e.free_symbols, points=("high",), unbounded=None), None)
    return None if env is None else evaluate(e, env)


def same_value(a: Number, b: Number, ranges: Ranges) -> bool:
    """Whether two sizes agree: structurally, else at every sample of ``symbol_values``.

    Proving symbolic equality needs ``sympy.simplify`` (seconds per call on the floor and Max
    terms convolution shapes bring); sizes here are polynomials with floor divisions over a
    few symbols, which agree everywhere they agree at these samples in practice, and the
    verify pass re-checks the resulting plan at the same points.
    """
    diff = a - b
    if isinstance(diff, int) or diff.is_number:
        return diff == 0
    # The difference, not each side: a symbol both sides share may cancel out of it, and
    # then the samples below do not bind it.
    return all(evaluate(diff, env) == 0 for env in symbol_values(ranges, diff.free_symbols))
