"""The command line: `ember run` keeps Python's behaviour and names missing APIs; `ember info`."""
import subprocess
import sys
import textwrap

import pytest


def ember(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "ember", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


def python(*args):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def script(tmp_path):
    def write(body, name="script.py"):
        p = tmp_path / name
        p.write_text(textwrap.dedent(body))
        return str(p)
    return write


def test_run_executes_an_unmodified_torch_script_with_arguments(script):
    p = script("""
        import sys
        import torch
        import torch.nn as nn
        from torch.nn import functional as F
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1))
        x, y = torch.randn(16, 3), torch.randn(16, 1)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        print(type(torch.ones(1)).__module__.split(".")[0], sys.argv[1:], loss.item() > 0)
    """)
    r = ember("run", p, "--flag", "7")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ember ['--flag', '7'] True"


def test_run_names_a_missing_api_and_the_script_line(script):
    p = script("import torch\nx = torch.ones(2)\ny = torch.frobnicate(x)\n")
    r = ember("run", p)
    assert r.returncode == 1
    assert f"{p}:3:" in r.stderr and "frobnicate" in r.stderr and "torch" in r.stderr
    assert "Traceback" not in r.stderr


def test_run_names_a_missing_module(script):
    r = ember("run", script("import torch.nonexistent_submodule\n"))
    assert r.returncode == 1 and "torch.nonexistent_submodule" in r.stderr


@pytest.mark.parametrize("body", ["x = (\n", "def f():\n    raise ValueError('boom')\nf()\n",
                                  "import sys\nsys.exit(3)\n"])
def test_run_errors_match_python(script, body):
    p = script("import torch\n" + body)
    r, expect = ember("run", p), python(p)
    assert r.returncode == expect.returncode
    if expect.stderr:
        assert r.stderr.splitlines()[-1] == expect.stderr.splitlines()[-1]


def test_run_missing_file_exits_2_like_python(tmp_path):
    r = ember("run", str(tmp_path / "nope.py"))
    assert r.returncode == 2 and "No such file or directory" in r.stderr


def test_info_lists_versions_and_backends():
    r = ember("info")
    assert r.returncode == 0 and "ember" in r.stdout and "numpy" in r.stdout
    for line in ("BLAS: ", "C kernels: ", "threads: ", "cuda: ", "distributed", "ONNX export: "):
        assert line in r.stdout
