"""Tables of benchmarks/bench.py's rows: one per part, as aligned text or as markdown."""

from __future__ import annotations

import statistics
import textwrap
from typing import Any, Callable

Row = dict[str, Any]
Column = tuple[str, Callable[[Row, list[Row]], str]]


def _get(key: str, fmt: str, scale: float = 1.0) -> Callable[[Row, list[Row]], str]:
    def cell(r: Row, rows: list[Row]) -> str:
        v = r.get(key)
        return "-" if v is None else format(v * scale if scale != 1.0 else v, fmt)

    return cell


def _spread(key: str, fmt: str = ".2f") -> Callable[[Row, list[Row]], str]:
    """The median and, in brackets, the min-max over repetitions."""
    def cell(r: Row, rows: list[Row]) -> str:
        if r.get(key) is None:
            return "-"
        lo, hi = r.get(f"{key}_min"), r.get(f"{key}_max")
        tail = f" [{lo:{fmt}}-{hi:{fmt}}]" if lo is not None and hi is not None else ""
        return f"{r[key]:{fmt}}{tail}"

    return cell


def _ratio(base_case: str) -> Callable[[Row, list[Row]], str]:
    """This row's ms/step over ``base_case``'s in the same model and schedule."""
    def cell(r: Row, rows: list[Row]) -> str:
        base = next((b for b in rows if b["case"] == base_case and b["model"] == r["model"]
                     and b["schedule"] == r["schedule"]), None)
        if base is None or not base.get("ms_per_step") or r.get("ms_per_step") is None:
            return "-"
        return f"{r['ms_per_step'] / base['ms_per_step']:.2f}"

    return cell


def _paired(base_case: str) -> Callable[[Row, list[Row]], str]:
    """With ``--rounds``: this row's median over ``base_case``'s in the same round (the two ran
    minutes apart on one machine), the median of those ratios and their min-max."""
    def cell(r: Row, rows: list[Row]) -> str:
        base = next((b for b in rows if b["case"] == base_case and b["model"] == r["model"]
                     and b["schedule"] == r["schedule"]), None)
        mine, theirs = r.get("round_medians") or [], (base or {}).get("round_medians") or []
        if len(mine) < 2 or len(mine) != len(theirs):
            return "-"
        ratios = [a / b for a, b in zip(mine, theirs, strict=True)]
        return f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"

    return cell


def _error(r: Row, rows: list[Row]) -> str:
    text = r.get("skipped") and f"skipped: {r['skipped']}" or r.get("error") or ""
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    if r.get("inductor_fallbacks"):  # its time is not Inductor's kernels' (run 38d)
        line = "; ".join(x for x in (f"Inductor refused {r['inductor_fallbacks']} graph(s), "
                                     "ATen kernels ran them", line) if x)
    return textwrap.shorten(line, 120, placeholder="...") if line else ""


# The largest gradient difference from an eager twin, relative to its largest gradient, past
# which the gradients are wrong, not rounded. bf16 rounding (2**-7 = 7.8e-3 a step) reads up to
# 2.1e-2 on llama-large 1F1B for torch.compile's default and 1.0e-2 for eager against itself
# (run 59b), where the same schedule in fp32 reads 1.5e-6 (59c); wrong bytes read 1e-1 and up
# (reduce-overhead's 2.6e28 and 1.8e41).
WRONG_GRADS = 5e-2


def _grad(r: Row, rows: list[Row]) -> str:
    v = r.get("max_grad_err")
    return "-" if v is None else f"{v:.1e}" + (" WRONG" if v > WRONG_GRADS else "")


def _key(k: str) -> Column:
    return (k, lambda r, rows: str(r.get(k, "")))


SPEED: list[Column] = [
    _key("model"), _key("schedule"), _key("case"),
    ("ms/step median [min-max]", _spread("ms_per_step")), ("x eager", _ratio("eager")),
    ("x reduce-overhead", _ratio("reduce-overhead")),
    ("x eager by round", _paired("eager")), ("x RO by round", _paired("reduce-overhead")),
    ("peak GiB", _get("peak_alloc_gib", ".2f")), ("steady GiB", _get("peak_steady_gib", ".2f")),
    ("in use GiB", _get("in_use_gib", ".2f")),
    ("reserved GiB", _get("reserved_gib", ".2f")),
    ("graph pools GiB", _get("graph_pools_gib", ".2f")),
    ("cached free GiB", _get("cached_free_gib", ".2f")), ("captures", _get("captures", "d")), ("copy-free", _get("copy_free_fraction", ".0%")),
    ("copied MiB/fwd", _get("copied_bytes_per_forward", ".1f", 2**-20)),
    ("slot MiB", _get("slot_bytes", ".0f", 2**-20)), ("warm s", _get("warm_s", ".1f")),
    ("grad err", _grad), ("error", _error)]
HOST: list[Column] = [
    _key("model"), _key("case"), ("fwd us/call", _spread("host_fwd_us", ".0f")),
    ("bwd us/call", _spread("host_bwd_us", ".0f")),
    ("host us/step (no sync)", _spread("host_step_us", ".0f")),
    ("wall us/step (sync)", _spread("wall_step_us", ".0f")),
    ("GPU us/step", _spread("gpu_step_us", ".0f")), _key("bound"), ("error", _error)]
WARMUP: list[Column] = [
    _key("model"), _key("case"), ("warm-up s", _get("warm_s", ".2f")),
    ("ms/step median [min-max]", _spread("ms_per_step")),
    ("captures in timed steps", _get("captures_in_timed_steps", "d")),
    ("compiles in timed steps", _get("compiles_in_timed_steps", "d")),
    ("peak GiB", _get("peak_alloc_gib", ".2f")), ("reserved GiB", _get("reserved_gib", ".2f")),
    ("error", _error)]
OFFLOAD: list[Column] = [
    _key("model"), _key("case"), ("ms/step median [min-max]", _spread("ms_per_step")),
    ("x eager", _ratio("eager")), ("peak GiB", _get("peak_alloc_gib", ".2f")),
    ("in use GiB", _get("in_use_gib", ".2f")), ("reserved GiB", _get("reserved_gib", ".2f")),
    ("graph pools GiB", _get("graph_pools_gib", ".2f")),
    ("cached free GiB", _get("cached_free_gib", ".2f")),
    ("offloaded MiB/step", _get("offloaded_bytes_per_step", ".1f", 2**-20)),
    ("link-min ms", _get("link_min_ms", ".2f")),
    ("copy overlap", _get("copy_overlap_fraction", ".0%")), ("grad err", _grad),
    ("error", _error)]
COMPILE: list[Column] = [
    _key("model"), _key("case"), ("first step s", _get("first_step_s", ".2f")),
    ("compile s (first - steady)", _get("compile_s", ".2f")),
    ("second shape s", _get("second_shape_s", ".2f")),
    ("steady ms", _get("steady_step_ms", ".1f")), ("compiles", _get("compiles", "d")),
    ("error", _error)]
COLUMNS = {"speed": SPEED, "host": HOST, "warmup": WARMUP, "offload": OFFLOAD,
           "compile": COMPILE}


def cells(part: str, rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    cols = COLUMNS[part]
    shown = [r for r in rows if r.get("model") != "-"]  # the host-link probe has its own line
    return [h for h, _ in cols], [[f(r, rows) for _, f in cols] for r in shown]


def text_table(part: str, rows: list[Row]) -> str:
    head, body = cells(part, rows)
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    fmt = " | ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    return "\n".join(lines + [fmt.format(*b) for b in body] + notes(part, rows))


def markdown_table(part: str, rows: list[Row]) -> str:
    head, body = cells(part, rows)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in b) + " |" for b in body]
    return "\n".join(lines + notes(part, rows))


def notes(part: str, rows: list[Row]) -> list[str]:
    """Lines under a part's table: the host link's bandwidth (offload), where to look next
    (host)."""
    if part == "host":
        return ["host us: perf_counter around each call, no sync inside the loop; wall: synced "
                "around the loop; GPU: steps queued behind a GPU sleep, timed by CUDA events. "
                "fxslots' own share, part by part, without a GPU: "
                "python benchmarks/host_overhead.py --components [--layers 24]"]
    memory = (["peak: allocated bytes at their most, warm-up included; in use: the steady "
               "peak plus the graph pools' bytes no live tensor holds (replays write their "
               "temporaries there without allocating), or the warm-up's peak if larger"]
              if part in ("speed", "offload") else [])
    link = next((r for r in rows if r.get("case") == "host-link"), None)
    if part != "offload" or link is None:
        return memory
    if link.get("h2d_gbps") is None:
        return memory + [f"host link: {_error(link, rows) or 'not measured'}"]
    return memory + [f"host link (pinned, 256 MiB copies): H2D {link['h2d_gbps']:.1f} GB/s, "
                     f"D2H {link['d2h_gbps']:.1f} GB/s; link-min = offloaded bytes / D2H + / H2D"]
