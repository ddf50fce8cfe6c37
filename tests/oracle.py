"""Helpers to run the same computation in ember and in PyTorch (the test oracle)."""
import re

import numpy as np
import pytest

import ember

torch = pytest.importorskip("torch")

TOL = {"float64": (1e-10, 1e-12), "float32": (1e-5, 1e-6), "float16": (2e-3, 1e-3),
       "bfloat16": (1.6e-2, 1e-2), "complex128": (1e-10, 1e-12), "complex64": (1e-5, 1e-6)}


def to_torch_dtype(dt):
    return getattr(torch, dt.name)


def to_torch(x, requires_grad=False):
    """ember tensor or NumPy array -> torch tensor (bf16/fp8 through float32)."""
    if isinstance(x, ember.Tensor):
        a, dt = x.detach().numpy(), x.dtype
    elif isinstance(x, np.ndarray):
        a, dt = x, ember._dtype.from_numpy_dtype(x.dtype)
    else:
        return x
    if dt.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        t = torch.from_numpy(np.array(a, dtype=np.float32)).to(to_torch_dtype(dt))
    else:
        t = torch.from_numpy(np.array(a))
    return t.requires_grad_(requires_grad)


def to_numpy(x):
    if isinstance(x, torch.Tensor):
        x = x.detach()
        if x.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
            x = x.float()
        return x.numpy(force=True)
    if isinstance(x, ember.Tensor):
        x = x.detach()
        if x.dtype in (ember.bfloat16, ember.float8_e4m3fn, ember.float8_e5m2):
            x = x.float()
        return x.numpy()
    return np.asarray(x)


def assert_close(e, t, dtype_name=None, rtol=None, atol=None, what=""):
    """Compare an ember result with a torch result: shape, dtype and values."""
    if isinstance(t, (tuple, list)):
        assert isinstance(e, (tuple, list)) and len(e) == len(t), f"{what}: {e!r} vs {t!r}"
        for i, (a, b) in enumerate(zip(e, t)):
            assert_close(a, b, dtype_name, rtol, atol, f"{what}[{i}]")
        return
    if t is None or e is None:
        assert t is None and e is None or _all_zero(e if t is None else t), \
            f"{what}: ember {e!r} vs torch {t!r}"
        return
    if isinstance(t, torch.Tensor):
        assert isinstance(e, ember.Tensor), f"{what}: expected a Tensor, got {type(e)}"
        assert tuple(e.shape) == tuple(t.shape), f"{what}: shape {tuple(e.shape)} != " \
                                                 f"torch {tuple(t.shape)}"
        assert e.dtype.name == str(t.dtype).replace("torch.", ""), \
            f"{what}: dtype {e.dtype.name} != torch {t.dtype}"
    dn = dtype_name or (e.dtype.name if isinstance(e, ember.Tensor) else "float64")
    r, a = TOL.get(dn, (0, 0))
    np.testing.assert_allclose(to_numpy(e), to_numpy(t), rtol=rtol if rtol is not None else r,
                               atol=atol if atol is not None else a, err_msg=what,
                               equal_nan=True)


def _all_zero(x):
    return bool((to_numpy(x) == 0).all())


# ---- one scenario, both libraries -----------------------------------------------------------


def _as_values(x):
    """Results of a scenario as NumPy/Python values, so torch's and ember's compare."""
    if isinstance(x, (torch.Tensor, ember.Tensor)):
        return x.detach().numpy() if x.dtype.is_floating_point or x.dtype.is_complex else \
            x.numpy()
    if isinstance(x, (list, tuple)):
        return [_as_values(v) for v in x]
    return x


def _run(fn, lib):
    try:
        return fn(lib), None
    except Exception as e:          # noqa: BLE001  (the error is the result to compare)
        return None, e


def same(fn, match=None):
    """Run ``fn(lib)`` with torch and ember: both raise the same type with ``match`` in both
    messages, or both return equal values (tensors, numbers, strings, nested lists)."""
    (t, te), (e, ee) = _run(fn, torch), _run(fn, ember)
    if te is not None or ee is not None:
        assert te is not None and ee is not None, f"torch: {te!r}, ember: {ee!r}"
        # a library's own error class (GradcheckError) matches by name and builtin base
        assert isinstance(ee, type(te)) or type(ee).__name__ == type(te).__name__ and \
            type(ee).__mro__[1:] == type(te).__mro__[1:], f"{te!r} vs {ee!r}"
        if match is not None:
            assert re.search(match, str(te)), f"torch: {te}"
            assert re.search(match, str(ee)), f"ember: {ee}"
        return None
    _compare(_as_values(e), _as_values(t))
    return e


def _compare(e, t, what="result"):
    if isinstance(t, list):
        assert isinstance(e, list) and len(e) == len(t), f"{what}: {e!r} vs {t!r}"
        for i, (a, b) in enumerate(zip(e, t)):
            _compare(a, b, f"{what}[{i}]")
    elif isinstance(t, np.ndarray):
        assert isinstance(e, np.ndarray), f"{what}: {e!r} vs {t!r}"
        assert e.shape == t.shape and e.dtype == t.dtype, f"{what}: {e!r} vs {t!r}"
        np.testing.assert_allclose(e, t, rtol=1e-6, atol=1e-8, err_msg=what)
    else:
        assert e == t, f"{what}: ember {e!r} vs torch {t!r}"
