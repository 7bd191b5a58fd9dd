"""``python -m fxslots explain MODULE:FACTORY --input SHAPE[,SHAPE...]``: look at a plan.

Builds a model from a factory function, explains one forward and backward with fxslots (on CUDA
when present, else CPU) and prints the report; ``--plot`` and ``--json`` write the picture and the
plan. A bad factory path, shape or option is a one-line error and exit status 2; a model that
fails to compile or run is a one-line error and exit status 1.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable, Sequence

PROG = "python -m fxslots"
USAGE_ERROR = 2
RUN_ERROR = 1

INT_LOW, INT_HIGH = 0, 64
"""Integer inputs are drawn uniformly from [INT_LOW, INT_HIGH): token ids for small vocabularies."""


class UsageError(Exception):
    """A bad command line: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not argparse's usage block
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message} (see --help)\n")


@dataclass(frozen=True)
class InputSpec:
    """One ``--input`` item: ``4x16`` (float32) or ``2x8:int64``."""

    shape: tuple[int, ...]
    dtype: Any  # torch.dtype

    def make(self, device: Any) -> Any:
        import torch

        if self.dtype == torch.bool:
            return torch.randint(0, 2, self.shape, device=device).bool()
        if self.dtype.is_floating_point or self.dtype.is_complex:
            return torch.randn(self.shape, dtype=self.dtype, device=device)
        return torch.randint(INT_LOW, INT_HIGH, self.shape, dtype=self.dtype, device=device)


_DTYPE_ALIASES = {
    "f32": "float32", "float": "float32", "f16": "float16", "half": "float16",
    "bf16": "bfloat16", "f64": "float64", "double": "float64", "i64": "int64", "long": "int64",
    "i32": "int32", "int": "int32", "i16": "int16", "i8": "int8", "u8": "uint8", "b8": "bool",
}
_DIM_RE = re.compile(r"^[0-9]+$")


def parse_dtype(name: str) -> Any:
    import torch

    key = _DTYPE_ALIASES.get(name.strip().lower(), name.strip().lower())
    dtype = getattr(torch, key, None) if key.isidentifier() else None
    if not isinstance(dtype, torch.dtype):
        raise UsageError(f"unknown dtype {name!r} (try float32, bfloat16, int64, bool)")
    if key not in _GENERATED:  # float8, quantized, bits...: no random values of them
        raise UsageError(f"dtype {name!r} has no random inputs; use one of "
                         f"{', '.join(_GENERATED)}")
    return dtype


_GENERATED = ("float32", "bfloat16", "float16", "float64", "complex64", "complex128", "int64",
              "int32", "int16", "int8", "uint8", "bool")


def parse_inputs(text: str) -> list[InputSpec]:
    """``"4x16,2x8:int64"`` -> two specs. Raises UsageError naming the bad item."""
    import torch

    specs = []
    for item in text.split(","):
        item = item.strip()
        shape_text, colon, dtype_text = item.partition(":")
        dims = shape_text.lower().split("x")
        if not shape_text or not all(_DIM_RE.match(d.strip()) for d in dims) or (
                colon and not dtype_text.strip()):
            raise UsageError(
                f"bad input shape {item!r}: expected sizes joined by 'x' with an optional dtype, "
                f"like 4x16 or 2x8:int64")
        dtype = parse_dtype(dtype_text) if dtype_text else torch.float32
        specs.append(InputSpec(tuple(int(d) for d in dims), dtype))
    return specs


def load_factory(path: str) -> Callable[[], Any]:
    """``"examples.models:mlp"`` -> the callable; ``"pkg.mod:Class.make"`` works too."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"expected MODULE:FACTORY (like examples.models:mlp), got {path!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise UsageError(f"cannot import module {module_name!r}: {_one_line(e)}") from e
    except Exception as e:  # the module itself raised while importing
        raise UsageError(f"importing {module_name!r} failed: {_one_line(e)}") from e
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"module {module_name!r} has no factory {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise UsageError(f"{path} is not callable (it is a {type(obj).__name__})")
    return obj


def build_model(path: str) -> Any:
    import torch

    factory = load_factory(path)
    try:
        model = factory()
    except Exception as e:
        raise UsageError(f"calling the factory {path}() failed: {_one_line(e)}") from e
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"the factory {path}() returned a {type(model).__name__}, "
                         f"not a torch.nn.Module")
    return model


def parse_option(text: str) -> tuple[str, Any]:
    """``"alignment=256"`` -> ("alignment", 256); values are Python literals, else strings."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"bad --option {text!r}: expected KEY=VALUE, like alignment=256")
    try:
        parsed = ast.literal_eval(value.strip())
    except (ValueError, SyntaxError):
        parsed = value.strip()
    return key.strip(), parsed


def build_options(args: argparse.Namespace) -> dict[str, Any]:
    from .options import Options

    options: dict[str, Any] = dict(parse_option(o) for o in args.option)
    if args.slots is not None:
        options["slots"] = args.slots
    if args.offload is not None:  # digits are a budget of device bytes per slot
        options["offload"] = int(args.offload) if args.offload.isdigit() else args.offload
    try:
        Options.parse(options)  # check before compiling: a bad option is a usage error
    except ValueError as e:  # OptionsError: its message names the option
        raise UsageError(str(e).strip().splitlines()[0]) from e
    return options


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def _device(choice: str) -> str:
    import torch

    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available")
    return choice


def check_inputs(model: Any, inputs: list[Any], target: str, text: str) -> None:
    """Run the model once in eager (eval mode, no grad) so that inputs it cannot take are a
    usage error naming the model's complaint, not a compile failure deep inside Dynamo."""
    import torch

    from .prepare import evaluating

    try:
        # Each submodule's own mode comes back (a norm kept frozen in eval stays so), not the
        # root's mode spread over all of them.
        with evaluating(model, True), torch.no_grad():
            model(*inputs)
    except Exception as e:
        raise UsageError(f"{target} does not run on --input {text}: {_one_line(e)}") from e


def explain_command(args: argparse.Namespace) -> int:
    specs = parse_inputs(args.input)
    options = build_options(args)
    for path in (args.json, args.plot):
        _check_writable(path)
    if args.plot:
        from .plot import require_matplotlib

        try:
            require_matplotlib()
        except ImportError as e:
            raise UsageError(str(e)) from e
    device = _device(args.device)

    import torch

    import fxslots

    torch.manual_seed(args.seed)
    model = build_model(args.target).to(device)
    inputs = [s.make(device) for s in specs]
    check_inputs(model, inputs, args.target, args.input)
    dynamic = True if args.dynamic else None
    try:
        report = fxslots.explain(model, *inputs, dynamic=dynamic, **options)
    except Exception as e:
        print(f"{PROG} explain: error: explaining {args.target} failed: {_one_line(e)}",
              file=sys.stderr)
        return RUN_ERROR
    print(report)
    _write(report, args)
    return 0


def _check_writable(path: str | None) -> None:
    """A file the command is to write, refused before anything runs where it cannot be."""
    import errno
    import os

    where = os.path.dirname(os.path.abspath(path)) if path else None
    if where is not None and not (os.path.isdir(where) and os.access(where, os.W_OK)):
        code = errno.EACCES if os.path.isdir(where) else errno.ENOENT
        raise UsageError(f"cannot write {path}: {os.strerror(code)}")


def _write(report: Any, args: argparse.Namespace) -> None:
    """The report's JSON and picture, where asked; a path that cannot be written is a usage
    error, not a traceback."""
    try:
        if args.json:
            with open(args.json, "w") as f:
                f.write(report.to_json() + "\n")
            print(f"fxslots: wrote the plan to {args.json}", file=sys.stderr)
        if args.plot:
            report.plot(args.plot)
            print(f"fxslots: wrote the picture to {args.plot}", file=sys.stderr)
    except OSError as e:
        raise UsageError(f"cannot write {e.filename}: {e.strerror}") from e


def make_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG,
                     description="Look at what fxslots does to a model.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    ex = sub.add_parser(
        "explain", prog=f"{PROG} explain",
        help="compile a model with fxslots, run one step, print the plan",
        description="Build a model from a factory function, explain one forward and backward "
                    "with fxslots (on CUDA when present, else CPU), and print the rewritten "
                    "graphs and the arena plan.")
    ex.add_argument("target", metavar="MODULE:FACTORY",
                    help="a function that takes no argument and returns an nn.Module, "
                         "e.g. examples.models:mlp")
    ex.add_argument("--input", "-i", required=True, metavar="SHAPE[,SHAPE...]",
                    help="one random tensor per shape, like 4x16 (float32) or 2x8:int64 "
                         f"(integers in [{INT_LOW}, {INT_HIGH}))")
    ex.add_argument("--slots", type=int, metavar="K", help="slots in the ring (option 'slots')")
    ex.add_argument("--offload", metavar="POLICY", help="activation offload policy")
    ex.add_argument("--option", "-o", action="append", default=[], metavar="KEY=VALUE",
                    help="any other fxslots option, e.g. -o alignment=256 -o copy_free=False")
    ex.add_argument("--dynamic", action="store_true",
                    help="compile with dynamic shapes (symbolic plan)")
    ex.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                    help="where to run (default: cuda when present, else cpu)")
    ex.add_argument("--seed", type=int, default=0, help="seed for the model and inputs")
    ex.add_argument("--plot", metavar="OUT.png", help="write the picture of the plan")
    ex.add_argument("--json", metavar="OUT.json", help="write the plan as JSON")
    ex.set_defaults(run=explain_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        return args.run(args)
    except UsageError as e:
        print(f"{PROG} {args.command}: error: {e}", file=sys.stderr)
        return USAGE_ERROR
