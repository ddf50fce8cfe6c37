"""tools/api_coverage.py measures ember's API against the installed torch and reports totals.

The coverage target lives in the issue tracker, not here: this checks the tool measures the
whole surface (every namespace listed, exclusions by rule) and that its totals add up.
"""
import contextlib
import io
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import api_coverage  # noqa: E402


@pytest.fixture(scope="module")
def report():
    # the command line's JSON, run in this process: torch's names are gathered once
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert api_coverage.main(["--json"]) == 0
    return json.loads(out.getvalue())


def test_rules_exclude_and_classify():
    ex = api_coverage.excluded_by
    assert api_coverage.EXCLUDE[ex("_foo", "torch")][1].startswith("private")
    assert ex("quantize_per_tensor", "torch") is not None and ex("qint8", "torch") is not None
    assert ex("solve", "torch.linalg") is None      # a Tensor/torch-only rule
    assert ex("solve", "torch.Tensor") is not None
    assert ex("add", "torch") is None and ex("uint16", "torch") is None
    assert ex("uint3", "torch") is not None
    # the C++ classes rule goes by the object's type, in torch only
    assert ex("Graph", "torch", "pybind11_type") is not None
    assert ex("Graph", "torch.fx", "type") is None
    # compressed sparse layouts and torch.compile are counted (no rule hides them)
    assert ex("to_sparse_csr", "torch.Tensor") is None and ex("compile", "torch") is None
    assert api_coverage.area_of("einsum") == "linalg"
    assert api_coverage.area_of("add") == "core"
    assert api_coverage.area_of("Normal", "torch.distributions") == "distributions"
    assert api_coverage.area_of("inv", "torch.linalg") == "linalg"


def test_names_are_torch_public_surface():
    names = api_coverage.torch_names()
    assert set(api_coverage.NAMESPACES) <= set(names)
    assert {"FloatTensor", "relu_", "pi", "unique", "HalfTensor"} <= set(names["torch"])
    assert "Normal" in names["torch.distributions"] and "SummaryWriter" in (
        names["torch.utils.tensorboard"] or {"SummaryWriter"})
    # __all__ plus what a namespace defines and its __all__ forgets; re-exports not counted
    assert "TorchFunctionMode" in names["torch.overrides"]
    assert "Tensor" not in names["torch.nn.functional"] and "relu" in names["torch.nn.functional"]
    assert "Optional" not in names["torch.nn"] and "Linear" in names["torch.nn"]


def test_json_report_has_consistent_totals(report):
    ns = report["namespaces"]
    assert list(ns) == api_coverage.NAMESPACES
    for v in ns.values():
        assert v["implemented"] + len(v["missing"]) == v["total"]
        if not v["in_ember"]:           # a namespace ember lacks: every name missing
            assert v["implemented"] == 0
    assert report["totals"]["total"] == sum(v["total"] for v in ns.values()) > 2000
    assert report["totals"]["implemented"] == sum(v["implemented"] for v in ns.values()) > 0
    assert sum(a["total"] for a in report["areas"].values()) == report["totals"]["total"]
    assert all(e["names_dropped"] >= 0 and e["reason"] for e in report["exclusions"])
    # names ember has are not listed as missing
    assert "add" not in ns["torch"]["missing"] and "add_" not in ns["torch.Tensor"]["missing"]
    assert "Linear" not in ns["torch.nn"]["missing"]


def test_markdown_report_and_areas_left_out():
    rep = api_coverage.measure(without=("linalg", "fft", "distributions"))
    assert rep["areas_left_out"] == ["linalg", "fft", "distributions"]
    assert "linalg" not in rep["areas"] and rep["namespaces"]["torch.linalg"]["total"] == 0
    assert rep["namespaces"]["torch.distributions"]["total"] == 0
    md = api_coverage.markdown(rep)
    assert "| **all** |" in md and "## Exclusion rules" in md and "## Missing" in md
    assert "distributions" in api_coverage.all_areas() and "core" in api_coverage.all_areas()
