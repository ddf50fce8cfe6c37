"""`make docs` (tools/apidocs.py) renders the API reference with pdoc, the re-exported ops and
layers included."""
import html
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))


@pytest.mark.slow
def test_api_reference_renders_public_names_with_examples(tmp_path):
    pytest.importorskip("pdoc", reason="pip install 'ember[docs]'")
    import apidocs
    apidocs.main(str(tmp_path))
    page = (tmp_path / "ember.html").read_text(encoding="utf-8")
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    # an op generated from the registry, with its doctest example
    assert 'id="clamp"' in page and ">>> ember.clamp(ember.tensor([-2., 0.5, 3.])" in text
    assert 'id="Conv2d"' in (tmp_path / "ember" / "nn.html").read_text(encoding="utf-8")
    assert not list(tmp_path.rglob("_*.html"))               # private modules left out


def test_registry_ops_get_their_forward_signatures():
    import inspect

    import apidocs

    import ember
    apidocs._op_signatures()
    assert str(inspect.signature(ember.add)) == "(input, other, alpha=1)"
    assert str(inspect.signature(ember.Tensor.sum)) == "(self, dim=None, keepdim=False, *, " \
        "dtype=None)"
    assert ember.add(ember.ones(1), ember.ones(1)).item() == 2.0     # still callable as before
