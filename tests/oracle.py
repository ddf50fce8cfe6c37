"""Helpers to run the same computation in ember and in PyTorch (the test oracle)."""
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
