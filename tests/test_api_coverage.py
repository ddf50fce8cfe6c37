"""tools/api_coverage.py measures ember's API against the installed torch and reports totals.

The coverage target lives in the issue tracker, not here: this only checks the tool works.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import api_coverage  # noqa: E402


def test_rules_exclude_and_classify():
    assert api_coverage.EXCLUDE[api_coverage.excluded_by("_foo", "torch")][1].startswith("private")
    assert api_coverage.excluded_by("quantize_per_tensor", "torch") is not None
    assert api_coverage.excluded_by("to_sparse_csr", "torch.Tensor") is not None
    assert api_coverage.excluded_by("solve", "torch.linalg") is None      # Tensor-only rule
    assert api_coverage.excluded_by("solve", "torch.Tensor") is not None
    assert api_coverage.excluded_by("add", "torch") is None
    assert api_coverage.area_of("einsum") == "linalg"
    assert api_coverage.area_of("add") == "core"


def test_json_report_has_consistent_totals():
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "api_coverage.py"), "--json"],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    r = json.loads(out)
    ns = r["namespaces"]
    assert {"torch", "torch.Tensor", "torch.nn.functional"} <= set(ns)
    for v in ns.values():
        assert v["implemented"] + len(v["missing"]) == v["total"]
    assert r["totals"]["total"] == sum(v["total"] for v in ns.values()) > 500
    assert r["totals"]["implemented"] == sum(v["implemented"] for v in ns.values()) > 0
    assert sum(a["total"] for a in r["areas"].values()) == r["totals"]["total"]
    assert all(e["names_dropped"] >= 0 and e["reason"] for e in r["exclusions"])
    # names ember has are not listed as missing
    assert "add" not in ns["torch"]["missing"] and "add_" not in ns["torch.Tensor"]["missing"]


def test_markdown_report_and_areas_left_out():
    report = api_coverage.measure(without=("linalg", "fft"))
    assert report["areas_left_out"] == ["linalg", "fft"]
    assert "linalg" not in report["areas"] and report["namespaces"]["torch.linalg"]["total"] == 0
    md = api_coverage.markdown(report)
    assert "| **all** |" in md and "## Exclusion rules" in md and "## Missing" in md
