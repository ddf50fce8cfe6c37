"""signal.windows against torch: values (float32/float64, sym and periodic), edge lengths,
options and errors."""
import numpy as np
import pytest

import ember

torch = pytest.importorskip("torch")
import torch.signal.windows  # noqa: E402,F401

NAMES = ember.signal.windows.__all__
OPTS = {"exponential": [{"tau": 0.5}, {"center": 1.5, "sym": False}], "gaussian": [{"std": 2.5}],
        "kaiser": [{"beta": 0.0}, {"beta": 5.0}], "general_cosine": [{"a": [0.5, 0.3, 0.2]}],
        "general_hamming": [{"alpha": 0.6}]}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("M", [0, 1, 2, 7, 16, 33])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_windows_match_torch(name, M, dtype):
    for opts in OPTS.get(name, [{}]) + ([{"a": [1.0]}] if name == "general_cosine" else []):
        for sym in (True, False):
            kw = {"sym": sym, **opts}
            if "center" in kw and kw["sym"]:
                continue
            e = getattr(ember.signal.windows, name)(M, dtype=getattr(ember, dtype), **kw)
            t = getattr(torch.signal.windows, name)(M, dtype=getattr(torch, dtype), **kw)
            assert str(e.dtype) == str(t.dtype) and tuple(e.shape) == tuple(t.shape)
            np.testing.assert_allclose(e.numpy(), t.numpy(), rtol=1e-6 if dtype == "float32"
                                       else 1e-13, atol=1e-7 if dtype == "float32" else 1e-15)


def test_requires_grad_and_default_dtype():
    w = ember.signal.windows.hann(5, requires_grad=True)
    assert w.requires_grad and w.dtype is ember.float32
    ember.set_default_dtype(ember.float64)
    try:
        assert ember.signal.windows.kaiser(4).dtype is ember.float64
    finally:
        ember.set_default_dtype(ember.float32)


@pytest.mark.parametrize("call", ["hann(-1)", "hann(3, dtype=L.int32)", "gaussian(3, std=0)",
                                  "exponential(3, tau=-1)", "exponential(3, center=1.0)",
                                  "kaiser(3, beta=-1)", "general_cosine(3, a=[])",
                                  "general_cosine(3, a=1.0)", "blackman(2, dtype=L.float16)",
                                  "bartlett(3, layout=L.sparse_coo)"])
def test_errors_match_torch(call):
    errs = []
    for L in (ember, torch):
        with pytest.raises((ValueError, TypeError)) as info:
            eval("L.signal.windows." + call, {"L": L})
        errs.append((type(info.value), str(info.value).replace("torch.", "").replace("ember.", "")))
    assert errs[0] == errs[1]
