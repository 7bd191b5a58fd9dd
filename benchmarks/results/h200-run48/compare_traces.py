"""Run 48a's traces compared kernel by kernel: where offload's step time goes on llama-small.

The compute kernels (everything but host<->device copies) of a case's first forward and first
backward are aligned with none's by name (difflib); for each matched pair of neighbours the
change in the gap between them, and each kernel's change in duration, are summed, and the
largest gap changes printed with the kernels around them.

    python3 benchmarks/results/h200-run48/compare_traces.py auto      (or auto_0.6)
"""

import difflib
import gzip
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def events(case):
    with gzip.open(os.path.join(HERE, f"trace-{case}.json.gz")) as fh:
        trace = json.load(fh)
    return sorted((e for e in trace["traceEvents"] if e.get("ph") == "X"
                   and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
                  key=lambda e: e["ts"])


def segments(ev, idle_us=300):
    """Runs of device work separated by idle gaps over ``idle_us``: forward, backward, ..."""
    out, cur, end = [], [], None
    for e in ev:
        if end is not None and e["ts"] - end > idle_us:
            out.append(cur)
            cur, end = [], None
        cur.append(e)
        end = max(end or 0, e["ts"] + e["dur"])
    out.append(cur)
    return [s for s in out if len(s) > 100]


def compute(seg):
    return [e for e in seg if not e["name"].startswith(("Memcpy DtoH", "Memcpy HtoD"))]


def compare(a, b, part):
    sm = difflib.SequenceMatcher(a=[e["name"] for e in a], b=[e["name"] for e in b],
                                 autojunk=False)
    pairs = [p for tag, i1, i2, j1, j2 in sm.get_opcodes() if tag == "equal"
             for p in zip(range(i1, i2), range(j1, j2))]
    extra = [b[j]["name"][:40] for tag, _, _, j1, j2 in sm.get_opcodes() if tag != "equal"
             for j in range(j1, j2)]
    gaps = []
    for (i0, j0), (i1, j1) in zip(pairs, pairs[1:]):
        ga = a[i1]["ts"] - a[i0]["ts"] - a[i0]["dur"]
        gb = b[j1]["ts"] - b[j0]["ts"] - b[j0]["dur"]
        gaps.append((gb - ga, j1, b[j0]["name"][:40], b[j1]["name"][:40]))
    span = lambda s: s[-1]["ts"] + s[-1]["dur"] - s[0]["ts"]  # noqa: E731
    dk = sum(b[j]["dur"] - a[i]["dur"] for i, j in pairs)
    memsets = sum(b[j]["dur"] - a[i]["dur"] for i, j in pairs if a[i]["name"].startswith("Memset"))
    print(f"{part}: span {span(a):.0f} -> {span(b):.0f} us; matched kernels +{dk:.0f} us "
          f"(memsets +{memsets:.0f}); gaps +{sum(g[0] for g in gaps):.0f}; only in the case: "
          f"{extra}")
    for g in sorted(gaps, reverse=True)[:10]:
        print(f"   gap +{g[0]:6.1f} us before kernel {g[1]}: after {g[2]!r}, before {g[3]!r}")


def main():
    case = sys.argv[1] if len(sys.argv) > 1 else "auto"
    base, other = segments(events("none")), segments(events(case))
    for part, k in (("forward", 0), ("backward", 1)):
        compare(compute(base[k]), compute(other[k]), part)


if __name__ == "__main__":
    main()
