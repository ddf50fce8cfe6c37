"""Helpers of the property tests (tests/test_properties_*.py): run one computation on ember and
on torch and compare the outcomes."""
import os

import numpy as np
import pytest

import ember

from oracle import to_numpy

torch = pytest.importorskip("torch")
hypothesis = pytest.importorskip("hypothesis")

# (EMBER_HYPOTHESIS_EXAMPLES=3000 for a deeper search than the suite's)
settings = hypothesis.settings(
    max_examples=int(os.environ.get("EMBER_HYPOTHESIS_EXAMPLES", 200)), deadline=None,
    derandomize=True)


def arange(T, shape, start=0, dtype=None):
    """0, 1, 2, ... (+ start) in ``shape``, float64 unless ``dtype`` says otherwise."""
    n = int(np.prod(shape))
    return (T.arange(n, dtype=dtype or T.float64) + start).reshape(shape)


def same_outcome(f):
    """f(ember) and f(torch): the same shape and dtype and values (within an ulp of float32 for
    float32 and float16, 1e-12 for float64, exactly for the rest; nans equal), or the same
    exception type; returns ember's result (None after an exception)."""
    try:
        want = f(torch)
    except Exception as e:             # noqa: BLE001 (torch's error type is the oracle)
        with pytest.raises(type(e)):
            f(ember)
        return None
    got = f(ember)
    assert tuple(got.shape) == tuple(want.shape)
    # NOTE: ember has no complex32 (NumPy has no complex half): where torch promotes float16
    # with a complex number to complex32, ember computes in complex64 (docs/coming-from-pytorch)
    if want.dtype == torch.complex32:
        want = want.to(torch.complex64)
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    tol = 1e-6 if want.dtype in (torch.float32, torch.complex64) else 1e-12
    if want.dtype.is_floating_point or want.dtype.is_complex:
        np.testing.assert_allclose(to_numpy(got), to_numpy(want), rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(to_numpy(got), to_numpy(want))
    return got
