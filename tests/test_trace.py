"""Structured traces: with TORCH_TRACE=dir each compile writes fxslots' plan and rewritten graphs
as artifacts beside Dynamo's and AOTAutograd's, where tlparse shows them."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARTIFACTS = ("fxslots_plan", "fxslots_forward", "fxslots_backward")


def read_trace(trace_dir: str) -> list[tuple[dict, str]]:
    """Every structured record of the trace logs in ``trace_dir``: (metadata, payload)."""
    records: list[tuple[dict, list[str]]] = []
    logs = glob.glob(os.path.join(trace_dir, "*.log"))
    assert logs, f"no trace log in {trace_dir}"
    for path in logs:
        with open(path) as f:
            for line in f:
                if line.startswith("\t"):
                    records[-1][1].append(line[1:].rstrip("\n"))
                else:
                    records.append((json.loads(line.split("] ", 1)[1]), []))
    return [(meta, "\n".join(payload)) for meta, payload in records]


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """One CLI run of the MLP under TORCH_TRACE: its stdout, its JSON plan, its trace."""
    tmp = tmp_path_factory.mktemp("trace")
    trace_dir, js = str(tmp / "trace"), str(tmp / "plan.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_")}
    env.update(TORCH_TRACE=trace_dir, CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "fxslots", "explain", "examples.models:mlp",
                        "--input", "4x16", "--slots", "2", "--json", js],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    with open(js) as f:
        plan = json.load(f)
    return {"stdout": r.stdout, "plan": plan, "records": read_trace(trace_dir),
            "dir": trace_dir}


def artifacts(records, name):
    return [(m, p) for m, p in records if m.get("artifact", {}).get("name") == name]


def test_each_compile_writes_plan_and_graphs_as_artifacts(traced):
    records = traced["records"]
    for name in ARTIFACTS:
        found = artifacts(records, name)
        assert len(found) == 1, f"{name}: {len(found)} artifacts"
        meta, payload = found[0]
        assert meta["artifact"]["encoding"] == ("json" if name == "fxslots_plan" else "string")
        # Attributed to the compile that made them (tlparse files them under [0/0]) ...
        assert (meta["frame_id"], meta["frame_compile_id"], meta["attempt"]) == (0, 0, 0)
        # ... and intact: the header's hash is the payload's.
        assert meta["has_payload"] == hashlib.md5(payload.encode()).hexdigest()
    # AOTAutograd's graphs of the same compile are in the same trace.
    aot = [m for m, _ in records if "aot_forward_graph" in m]
    assert aot and all(m.get("frame_id") == 0 for m in aot)


def test_trace_artifacts_are_what_explain_reports(traced):
    records = traced["records"]
    (_, plan), = artifacts(records, "fxslots_plan")
    assert json.loads(plan) == traced["plan"]["graphs"][0]
    (_, forward), = artifacts(records, "fxslots_forward")
    (_, backward), = artifacts(records, "fxslots_backward")
    assert forward.startswith("def forward(") and "aten.addmm.out" in forward
    assert backward.startswith("def backward(")
    # The report printed the very same rewritten graphs.
    assert forward in traced["stdout"] and backward in traced["stdout"]


@pytest.mark.skipif(shutil.which("tlparse") is None, reason="tlparse is not installed")
def test_tlparse_files_the_artifacts_beside_aot_graphs(traced, tmp_path):
    out = tmp_path / "tl_out"
    (log,) = glob.glob(os.path.join(traced["dir"], "*.log"))
    r = subprocess.run(["tlparse", log, "-o", str(out), "--no-browser", "--overwrite",
                        "--strict"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    with open(out / "compile_directory.json") as f:
        directory = json.load(f)
    names = [a["name"] for a in directory["[0/0]"]["artifacts"]]
    for prefix in ("aot_forward_graph_", "fxslots_plan_", "fxslots_forward_",
                   "fxslots_backward_"):
        assert any(n.startswith(prefix) for n in names), (prefix, names)
    (plan_file,) = [n for n in names if n.startswith("fxslots_plan_")]
    assert plan_file.endswith(".json")


RECOMPILE = """
import torch
from examples.models import MLP
model = torch.compile(MLP(), backend="fxslots", options={"slots": 2}, dynamic=False)
for batch in (4, 8):  # a second shape is a recompile of the same frame: a second variant
    model(torch.randn(batch, 16)).sum().backward()
"""


def test_every_recompile_writes_its_own_artifacts(tmp_path):
    trace_dir = str(tmp_path / "trace")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_")}
    env.update(TORCH_TRACE=trace_dir, CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", RECOMPILE], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    records = read_trace(trace_dir)
    for name in ARTIFACTS:
        ids = sorted((m["frame_id"], m["frame_compile_id"]) for m, _ in artifacts(records, name))
        assert ids == [(0, 0), (0, 1)], (name, ids)
    plans = [json.loads(p) for _, p in artifacts(records, "fxslots_plan")]
    assert [p["capacity"] for p in plans] == ["1024", "2048"]  # batch 4, then batch 8
