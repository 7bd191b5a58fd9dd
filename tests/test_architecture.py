"""The package's shape, checked: no import cycle (function-local imports counted), small files
and functions. docs/design.md shows the layout these keep true."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "fxslots"
MAX_FILE_LINES = 300
MAX_FUNCTION_LINES = 40


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, pathlib.Path]:
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


def _imports(name: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """Every fxslots module ``name`` imports, anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if sub in known else base)
    # Importing a.b.c runs a.b's __init__ first (fallback.py importing passes.observe ran
    # passes/__init__, which closed attention -> fallback -> passes -> routes -> out_variants
    # -> attention); the importer's own packages are under way already.
    own = {package.rsplit(".", k)[0] for k in range(package.count(".") + 1)}
    out |= {m.rsplit(".", k)[0] for m in set(out) for k in range(1, m.count(".") + 1)}
    return {m for m in out if m in known and m != name and m not in own}


def test_no_import_cycle_among_fxslots_modules():
    mods = _modules()
    graph = {n: _imports(n, p, set(mods)) for n, p in mods.items()}
    # A package's __init__ that only re-exports is imported by its children through "from .
    # import x"; those edges are to the submodule x (resolved above), not the package.
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        path.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                cycle = path[path.index(m):] + [m]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if m not in state:
                visit(m)
        path.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)


def test_no_file_over_the_limit():
    long = {str(p.relative_to(ROOT)): n for p in ROOT.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES}
    assert not long, f"files over {MAX_FILE_LINES} lines: {long}"


def test_no_function_over_the_limit():
    long = {}
    for p in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n >= MAX_FUNCTION_LINES:
                    long[f"{p.relative_to(ROOT)}:{node.name}"] = n
    assert not long, f"functions of {MAX_FUNCTION_LINES} lines or more: {long}"


def test_private_torch_names_only_in_the_torch_module():
    allowed = ROOT / "_torch"  # the package fxslots._torch
    hits = []
    for p in ROOT.rglob("*.py"):
        if p.is_relative_to(allowed):
            continue
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            mod = getattr(node, "module", None) or ""
            names = [a.name for a in getattr(node, "names", [])] if isinstance(
                node, (ast.Import, ast.ImportFrom)) else []
            if any(part.startswith("_") for part in (mod.split(".") + [
                    n for m in names for n in m.split(".")]) if part and mod.startswith("torch")
                   or any(n.startswith("torch._") for n in names)):
                hits.append(f"{p.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.Attribute) and node.attr in (
                    "_schema", "_boxed_call", "var_to_range", "_C", "_ops", "_guards",
                    "_dynamo", "_functorch", "_subclasses", "_logging", "_inductor"):
                hits.append(f"{p.relative_to(ROOT)}:{node.lineno} .{node.attr}")
    assert not hits, f"private torch names outside fxslots/_torch/: {hits}"
