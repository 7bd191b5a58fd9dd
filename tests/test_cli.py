"""``python -m fxslots explain``: run as a subprocess, as users run it (on CPU here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from fxslots import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fxslots_cli(*args: str, env: dict | None = None, timeout: int = 120):
    """Run ``python -m fxslots ARGS`` from the repository root (so examples.models imports)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_")}
    full_env["PYTHONPATH"] = ROOT + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env["CUDA_VISIBLE_DEVICES"] = ""  # these tests call nothing on CUDA
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "fxslots", *args], cwd=ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def test_explain_prints_the_report_and_writes_plot_and_json(tmp_path):
    png, js = tmp_path / "plan.png", tmp_path / "plan.json"
    r = fxslots_cli("explain", "examples.models:mlp", "--input", "4x16", "--slots", "2",
                    "--plot", str(png), "--json", str(js))
    assert r.returncode == 0, r.stderr
    assert "===== graph 0 (v0 of region 0) =====" in r.stdout
    assert "aten.addmm.out" in r.stdout and "arena bytes per slot: 1024" in r.stdout
    data = json.loads(js.read_text())
    assert [s["slot"] for s in data["slots"]] == [0, 1]  # --slots 2 reached the backend
    assert data["graphs"][0]["capacity"] == "1024"
    from PIL import Image

    with Image.open(png) as img:
        img.load()
        assert img.format == "PNG" and img.size[0] == 1200
    assert f"wrote the picture to {png}" in r.stderr and f"wrote the plan to {js}" in r.stderr


def test_explain_integer_inputs_and_options():
    r = fxslots_cli("explain", "examples.models:gpt", "--input", "2x8:int64", "--slots", "2",
                    "-o", "alignment=256", "-o", "copy_free=False")
    assert r.returncode == 0, r.stderr
    assert "primals_1: i64[2, 8]" in r.stdout
    assert "copy-free: 0" in r.stdout and "copied    offset 256" in r.stdout  # the options


BAD_COMMAND_LINES = [
    (["nope_no_such_module:make", "--input", "4x16"],
     "cannot import module 'nope_no_such_module'"),
    (["examples.models:nope", "--input", "4x16"],
     "module 'examples.models' has no factory 'nope'"),
    (["examples.models", "--input", "4x16"], "expected MODULE:FACTORY"),
    (["examples.models:MLP.__init__", "--input", "4x16"], "calling the factory"),
    (["examples.models:math", "--input", "4x16"], "is not callable"),
    (["examples.models:mlp", "--input", "4xq"], "bad input shape '4xq'"),
    (["examples.models:mlp", "--input", "4x16,"], "bad input shape ''"),
    (["examples.models:mlp", "--input", "4x16:float99"], "unknown dtype 'float99'"),
    # found by a review: these parsed, then crashed making a random input, with a traceback
    (["examples.models:mlp", "--input", "4x16:float8_e4m3fn"],
     "dtype 'float8_e4m3fn' has no random inputs; use one of float32, bfloat16"),
    (["examples.models:mlp", "--input", "4x16:qint8"], "dtype 'qint8' has no random inputs"),
    (["examples.models:mlp", "--input", "4x16", "--json", "/no/such/dir/plan.json"],
     "cannot write /no/such/dir/plan.json: No such file or directory"),
    (["examples.models:mlp", "--input", "4x8"],
     "examples.models:mlp does not run on --input 4x8: RuntimeError: mat1 and mat2 shapes"),
    (["examples.models:mlp", "--input", "4x16", "--offload", "bogus"],
     "fxslots option 'offload' must be 'none', 'all', 'auto', 'auto:<share>' (a share of the link's time under compute, above 0 and at most 1), 'above:<bytes>', a budget of device bytes per slot (an int >= 0) or a predicate over a saved tensor, got 'bogus'"),
    (["examples.models:mlp", "--input", "4x16", "--slots", "0"],
     "fxslots option 'slots' must be >= 1 and <= 1024, got 0"),
    (["examples.models:mlp", "--input", "4x16", "-o", "nope=1"], "unknown option(s) ['nope']"),
    (["examples.models:mlp"], "the following arguments are required: --input"),
]
SUBPROCESS = {0, 5, 12}  # a bad factory, a bad shape, --offload: also run as users run them


def check_usage_error(rc, stdout, stderr, message):
    assert rc == 2, (stdout, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("python -m fxslots explain: error: ") and message in lines[0]
    assert stdout == ""


@pytest.mark.parametrize("args,message", [BAD_COMMAND_LINES[i] for i in sorted(SUBPROCESS)])
def test_bad_command_lines_exit_2_with_one_line(args, message):
    r = fxslots_cli("explain", *args)
    check_usage_error(r.returncode, r.stdout, r.stderr, message)


@pytest.mark.parametrize("args,message", BAD_COMMAND_LINES)
def test_bad_command_lines_in_process(args, message, capsys):
    try:
        rc = cli.main(["explain", *args, "--device", "cpu"])
    except SystemExit as e:  # argparse's own errors
        rc = e.code
    out = capsys.readouterr()
    check_usage_error(rc, out.out, out.err, message)


def test_no_command_is_a_usage_error():
    r = fxslots_cli()
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


# In-process: the parsers alone (fast).

def test_parse_inputs():
    specs = cli.parse_inputs("4x16, 2x8:int64,3:bf16,2x2:bool")
    assert [(s.shape, s.dtype) for s in specs] == [
        ((4, 16), torch.float32), ((2, 8), torch.int64), ((3,), torch.bfloat16),
        ((2, 2), torch.bool)]
    ints = specs[1].make("cpu")
    assert ints.dtype == torch.int64 and int(ints.min()) >= 0 and int(ints.max()) < cli.INT_HIGH
    assert specs[3].make("cpu").dtype == torch.bool
    for bad in ["", "x", "4x", "4x-1", "4.0x2", "4x16:", "4x16:torch", "4x16:finfo"]:
        with pytest.raises(cli.UsageError):
            cli.parse_inputs(bad)


def test_parse_option_reads_python_literals():
    assert cli.parse_option("alignment=256") == ("alignment", 256)
    assert cli.parse_option("copy_free=False") == ("copy_free", False)
    assert cli.parse_option("max_arena_bytes=None") == ("max_arena_bytes", None)
    assert cli.parse_option("partitioner=default") == ("partitioner", "default")
    with pytest.raises(cli.UsageError):
        cli.parse_option("alignment")


def test_offload_policy_reaches_the_plan():
    out = subprocess.run([sys.executable, "-m", "fxslots", "explain", "examples.models:mlp",
                          "--input", "4x16", "--slots", "2", "--offload", "all"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "offloaded" in out.stdout and "host arena bytes per slot: 1024" in out.stdout


def test_checking_inputs_puts_back_each_submodules_mode():
    # A norm kept frozen in eval mode inside a training model must stay frozen: the check runs
    # the model in eval mode, then gives every submodule its own mode back, not the root's.
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    model[1].eval()
    cli.check_inputs(model, [torch.randn(3, 4)], "m", "3x4")
    assert model.training and model[0].training and not model[1].training
    with pytest.raises(cli.UsageError, match="does not run on --input 3x5"):
        cli.check_inputs(model, [torch.randn(3, 5)], "m", "3x5")
    assert model.training and not model[1].training
