"""The options of the fxslots backend: one frozen, validated type."""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .errors import OptionsError

MAX_SLOTS = 1024
"""Upper bound of ``slots``. Each slot holds a whole arena of the largest variant, and every
forward looks at each slot to find a free one (about 0.3 us a slot on 2 CPU cores, so 0.3 ms at
this bound); pipeline schedules keep a few dozen microbatches in flight, not thousands."""
MAX_ALIGNMENT = 2**21
"""Upper bound of ``alignment`` (2 MiB, the largest page size hosts and the CUDA allocator use):
a larger alignment buys nothing and pads every storage group of every slot by up to that much."""
MAX_ARENA_BYTES = 2**48
"""Upper bound of ``max_arena_bytes`` (256 TiB, more than any device or host holds): a larger
value is a unit mistake. ``None`` means no limit."""


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


@dataclass(frozen=True)
class Options:
    """`torch.compile(model, backend="fxslots", options={...})`.

    Invariants (checked in ``__post_init__``): ``1 <= slots <= MAX_SLOTS``; ``alignment`` is a
    power of two from 16 bytes to ``MAX_ALIGNMENT``; ``max_arena_bytes`` is None or in
    ``1..MAX_ARENA_BYTES``; ``cudagraphs`` is None (auto: on for CUDA graphs), True or False;
    ``on_capture_failure`` is "raise" or "eager".
    """

    slots: int = 1
    """K: how many forwards may wait for their backward at once (microbatches in flight)."""
    alignment: int = 512
    """Byte alignment of every storage group inside a slot's arena."""
    copy_free: bool = True
    """Let producers write saved tensors straight into the slot (out= forms) instead of copying."""
    max_arena_bytes: int | None = None
    """Refuse a variant whose saved tensors need more than this many bytes per slot."""
    cudagraphs: bool | None = None
    """Capture each (variant, slot, direction) as a CUDA graph. None: yes when on CUDA."""
    capture_inference: bool = True
    """Capture inference graphs (forwards under no_grad or inference_mode) as CUDA graphs too,
    one per input shape (``runtime.cudagraphs.inference``). False: they run uncaptured."""
    on_capture_failure: str = "raise"
    """"raise": a failed capture raises, naming the node; "eager": that graph runs uncaptured."""
    memsets: str = field(
        default_factory=lambda: os.environ.get("FXSLOTS_MEMSETS", "").strip() or "kernels")
    """How memsets run inside captured CUDA graphs: "kernels" (each memset node of at most
    1 MiB becomes a kernel node writing the same bytes, before the graph is instantiated: a
    memset node costs more than a kernel and waits behind host-to-device copies on other
    streams, such as offload's reloads; ``fxslots.runtime.cudagraphs.memsets``) or "nodes" (as
    captured). "kernels" took 0.986x the step of "nodes" on llama-small with offload="auto"
    and 0.998x on llama-large under Inductor (H100 run 51). The environment variable
    FXSLOTS_MEMSETS sets the default."""
    debug: bool = field(default_factory=lambda: _env_flag("FXSLOTS_DEBUG"))
    """Host-side ownership checks, NaN-poisoned released arenas, stale-output warnings."""
    strict: bool = False
    """Raise instead of warning when a graph cannot use slots and falls back."""
    partitioner: str = "auto"
    """How AOTAutograd splits forward from backward: a name in ``fxslots.policies.PARTITIONERS``,
    or "auto" (min-cut under Inductor or activation checkpointing, else default:
    ``policies.resolve_partitioner``)."""
    recompute: str = "norms"
    """Forward ops to recompute in backward instead of saving: a name in
    ``fxslots.policies.RECOMPUTE`` ('none', 'norms' or 'pointwise')."""
    offload: Any = "none"
    """Which saved groups go to the slot's host arena: 'none', 'all', 'auto', 'auto:<share>'
    (fill only that share of the forward's time with copies), 'above:<bytes>', an int budget
    of device saved bytes per slot, or a predicate over a ``SavedTensor`` (see
    ``fxslots.offloading``)."""
    link_bandwidth: float | None = None
    """Host link bytes/s for offload planning; None: measured once per device."""
    offload_window: Any = "auto"
    """Device bytes that offloaded values waiting for their copy to the host, and reloaded
    groups still to be read, may hold at once: an int, or "auto" (twice the largest offloaded
    group, at least 64 MiB: ``fxslots.offloading.offload_window``). A smaller window saves
    memory where the link is slower than compute, by making compute wait for it."""
    grad_accumulation: str = "graph"
    """Who adds gradients into existing ``.grad`` buffers: "graph" (the backward, inside its
    CUDA graph), "fused" (as "graph", and under CUDA graphs a gradient that is a matrix
    product, a weight's, is added by its GEMM as it is computed, beta=1: no gradient
    temporary, no add reading it back; one rounding of the sum instead of eager's two, so
    within an ulp of eager's, not bitwise; ATen kernels: Inductor's code adds its own way) or
    "autograd" (one launch per parameter after it; needed by hooks on the gradient
    accumulator itself, such as DDP's reducer)."""
    grads_in_arena: bool = True
    """Under CUDA graphs, write parameter gradients into saved bytes of the slot's arena the
    backward has finished reading (``fxslots.overlay``), instead of a buffer of their own, once
    the training loop has shown it drops ``.grad`` before the next forward: eager's footprint.
    ATen kernels only (Inductor's code does not run in node order)."""
    pool_room: bool = True
    """Under CUDA graphs with ATen kernels, make one segment of the graph pool, inside a model's
    first capture, as large as the most any of its captures holds at once, for every capture
    to cut its blocks from (``fxslots.runtime.cudagraphs.room``; llama-large's pool at one
    shape 1758 -> 1036 MiB, H100 run 56). False: each block that fits no free one takes a
    segment of its own."""
    arena_group: str | None = None
    """Compiled regions with the same group name share one slot ring and staging buffer (their
    frames are never live at once beyond ``slots``); ``fxslots.pipelining`` names one per rank."""
    kernels: str = field(
        default_factory=lambda: os.environ.get("FXSLOTS_KERNELS", "").strip() or "aten")
    """Who runs the rewritten graphs: "aten" (ATen kernels, one per op) or "inductor" (Inductor
    compiles them; saved values are stored into the slot by its kernels). The environment
    variable FXSLOTS_KERNELS sets the default (to run a whole test suite under Inductor)."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check_type(f.name, getattr(self, f.name))
        _check_bounds(self)
        self._check_choices()

    def _check_choices(self) -> None:
        from .offloading import parse_offload
        from .policies import AUTO, PARTITIONERS, RECOMPUTE

        try:
            parse_offload(self.offload)
        except ValueError as e:
            raise OptionsError(str(e)) from None
        for name, valid in (("recompute", sorted(RECOMPUTE)),
                            ("partitioner", sorted([*PARTITIONERS, AUTO])),
                            ("grad_accumulation", ("graph", "fused", "autograd")),
                            ("kernels", ("aten", "inductor")),
                            ("on_capture_failure", ("raise", "eager")),
                            ("memsets", ("kernels", "nodes"))):
            if getattr(self, name) not in valid:
                # Registries (lists) may grow: list them; fixed pairs read as a choice.
                what = (f"one of {valid}" if isinstance(valid, list)
                        else " or ".join(map(repr, valid)))
                var = f"FXSLOTS_{name.upper()}"
                env = (f" (from the environment variable {var})" if name in ("kernels", "memsets")
                       and os.environ.get(var) == getattr(self, name) else "")
                raise OptionsError(f"fxslots option {name!r} must be {what}, "
                                   f"got {getattr(self, name)!r}{env}")

    @classmethod
    def parse(cls, options: Mapping[str, Any] | "Options" | None) -> "Options":
        """Options from ``torch.compile(..., options=...)``: a mapping of option names to
        values (or an ``Options``, or None for the defaults); raises ``OptionsError``."""
        if isinstance(options, Options):
            return options
        if options is not None and not isinstance(options, Mapping):
            raise OptionsError(
                f"fxslots options must be a dict such as {{'slots': 2}}, got "
                f"{type(options).__name__} {options!r}; valid options are {_names()}")
        options = dict(options or {})
        unknown = sorted((k for k in options if k not in _names()), key=repr)
        if unknown:
            raise OptionsError(
                f"fxslots got unknown option(s) {unknown}; valid options are {_names()}"
            )
        return cls(**options)


def refusing(error: OptionsError) -> Callable[..., Any]:
    """What the backend hands Dynamo in place of a compiled graph when it refuses the options:
    a function raising ``error`` again at every call, starting with the first. Raised inside
    the backend, Dynamo would wrap it in its own ``BackendCompilerFailed``, which
    ``except fxslots.OptionsError`` does not catch. Nothing runs before it raises."""
    message = str(error)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OptionsError(message)  # a fresh one each call: no traceback piles up

    return refuse


def _names() -> list[str]:
    return [f.name for f in dataclasses.fields(Options)]


def _check_bounds(o: Options) -> None:
    """Each bound names the option, the value and the range (docs/reliability.md, README)."""
    if not 1 <= o.slots <= MAX_SLOTS:
        raise OptionsError(
            f"fxslots option 'slots' must be >= 1 and <= {MAX_SLOTS}, got {o.slots}: it is the "
            f"number of microbatches in flight at once, each holding one arena")
    a = o.alignment
    if a < 16 or a & (a - 1) or a > MAX_ALIGNMENT:
        raise OptionsError(
            f"fxslots option 'alignment' must be a power of two >= 16 bytes and <= "
            f"{MAX_ALIGNMENT} (2 MiB), got {a}")
    w = o.offload_window
    if (w != "auto") if isinstance(w, str) else w <= 0:
        raise OptionsError(
            f"fxslots option 'offload_window' must be 'auto' or a positive number of bytes, "
            f"got {w!r}")
    link = o.link_bandwidth
    if link is not None and not 0 < link < math.inf:  # NaN fails too
        raise OptionsError(
            f"fxslots option 'link_bandwidth' must be a positive, finite number of bytes per "
            f"second (such as 55e9 for a 55 GB/s host link), or None to measure it, got {link}")
    limit = o.max_arena_bytes
    if limit is not None and not 0 < limit <= MAX_ARENA_BYTES:
        raise OptionsError(
            f"fxslots option 'max_arena_bytes' must be positive and <= {MAX_ARENA_BYTES} "
            f"(256 TiB), or None for no limit, got {limit}")


_TYPES = {
    "slots": (int,),
    "alignment": (int,),
    "copy_free": (bool,),
    "max_arena_bytes": (int, type(None)),
    "cudagraphs": (bool, type(None)),
    "capture_inference": (bool,),
    "on_capture_failure": (str,),
    "memsets": (str,),
    "debug": (bool,),
    "strict": (bool,),
    "partitioner": (str,),
    "offload": (str, int, Callable),
    "link_bandwidth": (int, float, type(None)),
    "offload_window": (str, int),
    "recompute": (str,),
    "grad_accumulation": (str,),
    "grads_in_arena": (bool,),
    "pool_room": (bool,),
    "arena_group": (str, type(None)),
    "kernels": (str,),
}


def _check_type(name: str, value: Any) -> None:
    types = _TYPES[name]
    # bool is an int in Python; 'slots': True is a mistake, not a 1.
    if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
        names = " or ".join("None" if t is type(None) else t.__name__ for t in types)
        raise OptionsError(
            f"fxslots option {name!r} must be {names}, got {type(value).__name__} {value!r}"
        )
    if name == "arena_group" and value == "":
        raise OptionsError("fxslots option 'arena_group' must be a non-empty name or None")
