"""dispatch's C fast path: the CPython extension ``_dispatch`` (built from ``_dispatch.c`` and
its headers) that copies the hot part of ``ember/_ops/dispatch.py``: the quick op paths, graph
recording, the backward loop, leaf accumulation, and ``TensorBase`` / ``SizeBase`` (a Tensor's
and a Size's fields in C).

``ext`` is the extension module, or None where it is not built or ``EMBER_NO_C=1`` is set;
asked once, at import: Tensor's base class depends on it. The Python code stays the reference
(docs/kernels.md); tests/test_dispatch_equivalence.py runs every registry sample through both.
"""
import os


def _load():
    if os.environ.get("EMBER_NO_C", "") not in ("", "0"):
        return None
    try:
        from . import _dispatch
    except ImportError:
        return None
    return _dispatch


ext = _load()
