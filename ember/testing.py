"""``ember.testing``: ``assert_close`` and ``make_tensor``, as in ``torch.testing``."""
import collections.abc
import math

import numpy as np

import ember

from . import _dtype

# (rtol, atol) by dtype when neither is given: torch's defaults
_TOLERANCES = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5),
               "float64": (1e-7, 1e-7), "complex64": (1.3e-6, 1e-5), "complex128": (1e-7, 1e-7),
               "float8_e4m3fn": (1.25e-1, 1e-3), "float8_e5m2": (2.5e-1, 1e-3)}


def assert_close(actual, expected, *, allow_subclasses=True, rtol=None, atol=None,
                 equal_nan=False, check_device=True, check_dtype=True, check_layout=True,
                 check_stride=False, msg=None):
    """Raise ``AssertionError`` unless ``actual`` and ``expected`` (tensors, NumPy arrays,
    numbers, or sequences and mappings of them) are close: ``|a - e| <= atol + rtol * |e|``
    elementwise, with the same shape, and by default dtype and device.

    Example:
        >>> ember.testing.assert_close(ember.tensor([1.0, 2.0]), ember.tensor([1.0, 2.0 + 1e-7]))
    """
    if (rtol is None) != (atol is None):
        raise ValueError(f"Both 'rtol' and 'atol' must be either specified or omitted, but got "
                         f"no {'rtol' if rtol is None else 'atol'}.")
    _compare(actual, expected, (), locals())


def _compare(actual, expected, path, opts):
    if isinstance(actual, collections.abc.Mapping) and \
            isinstance(expected, collections.abc.Mapping):
        if set(actual) != set(expected):
            lines = ["The keys of the mappings do not match:"]
            for what, keys in (("Missing keys in", set(expected) - set(actual)),
                               ("Additional keys in", set(actual) - set(expected))):
                if keys:
                    lines.append(f"{what} the actual mapping: {sorted(keys, key=str)}")
            _fail(opts, path, "\n".join(lines))
        for k in actual:
            _compare(actual[k], expected[k], path + (k,), opts)
        return
    if _is_sequence(actual) and _is_sequence(expected):
        if len(actual) != len(expected):
            _fail(opts, path, f"The length of the sequences mismatch: {len(actual)} != "
                              f"{len(expected)}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, path + (i,), opts)
        return
    for x in (actual, expected):
        if not isinstance(x, (ember.Tensor, bool, int, float, complex, np.ndarray, np.generic)):
            _fail(opts, path, f"No comparison pair was able to handle inputs of type "
                              f"{type(actual)} and {type(expected)}.", TypeError)
    a, e = _as_tensor(actual), _as_tensor(expected)
    if tuple(a.shape) != tuple(e.shape):
        _fail(opts, path, f"The values for attribute 'shape' do not match: {a.shape} != {e.shape}.")
    if opts["check_device"] and a.device != e.device:
        _fail(opts, path, f"The values for attribute 'device' do not match: {a.device} != "
                          f"{e.device}.")
    if opts["check_dtype"] and a.dtype != e.dtype:
        _fail(opts, path, f"The values for attribute 'dtype' do not match: {a.dtype} != {e.dtype}.")
    if opts["check_stride"] and a.stride() != e.stride():
        _fail(opts, path, f"The values for attribute 'stride()' do not match: {a.stride()} != "
                          f"{e.stride()}.")
    rtol, atol = opts["rtol"], opts["atol"]
    if rtol is None:
        rtol, atol = max((_TOLERANCES.get(t.dtype.name, (0.0, 0.0)) for t in (a, e)),
                         key=lambda tol: tol[0])
    x, y = _host(a), _host(e)
    if x.dtype.kind in "fc" or y.dtype.kind in "fc":       # (compared in their common dtype)
        ft = np.result_type(x, y)
        x, y = x.astype(ft), y.astype(ft)
    else:
        x, y = x.astype(np.int64), y.astype(np.int64)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(x - y)
        # (an inf or nan must match exactly: its difference is no measure)
        bad = ~((x == y) | np.isfinite(x) & np.isfinite(y) & (diff <= atol + rtol * np.abs(y)))
    if opts["equal_nan"]:
        bad &= ~(np.isnan(x) & np.isnan(y))
    if bad.any():
        _fail(opts, path, _mismatch(x, y, diff, bad, rtol, atol))


def _is_sequence(x):
    return isinstance(x, collections.abc.Sequence) and not isinstance(x, str)


def _as_tensor(x):
    if isinstance(x, (bool, int, float, complex)):   # (Python numbers: 64-bit, as in torch)
        return ember.as_tensor(x, dtype={bool: ember.bool, int: ember.int64, float:
                                         ember.float64, complex: ember.complex128}[type(x)])
    return x if isinstance(x, ember.Tensor) else ember.as_tensor(x)


def _host(t):
    a = t.detach().cpu().numpy() if t.dtype.name not in ("bfloat16",) and \
        not t.dtype.name.startswith("float8") else t.detach().cpu().float().numpy()
    return np.asarray(a)


def _mismatch(x, y, diff, bad, rtol, atol):
    """torch's report: for one element its two values, else the count of mismatches and where
    the greatest absolute and relative differences are."""
    exact = rtol == 0 and atol == 0
    head = f"{'Scalars' if x.ndim == 0 else 'Tensor-likes'} are not " \
        f"{'equal' if exact else 'close'}!\n\n"
    up_a, up_r = ("", "") if exact else (f" (up to {atol} allowed)", f" (up to {rtol} allowed)")
    if x.ndim == 0:         # (in Python numbers, as torch)
        d, e = diff.item(), abs(y.item())
        return (f"{head}Expected {y.item()} but got {x.item()}.\nAbsolute difference: "
                f"{d}{up_a}\nRelative difference: {d / e if e else math.inf}{up_r}")
    ft = np.float32 if diff.dtype.kind in "iu" else diff.dtype
    with np.errstate(all="ignore"):
        rel = diff.astype(ft) / np.abs(y).astype(ft)
    lines = [f"{head}Mismatched elements: {int(bad.sum())} / {bad.size} "
             f"({100 * bad.sum() / bad.size:.1f}%)"]
    for name, d, up in (("absolute", diff, up_a), ("relative", rel, up_r)):
        masked = np.where(bad, d, 0)
        nans = np.isnan(masked) if masked.dtype.kind in "fc" else np.zeros(bad.shape, bool)
        k = int(np.argmax(nans)) if nans.any() else int(np.argmax(masked))
        at = tuple(int(i) for i in np.unravel_index(k, bad.shape))
        lines.append(f"Greatest {name} difference: {masked[at]} at index {at}{up}")
    return "\n".join(lines)


def _fail(opts, path, text, error=AssertionError):
    msg = opts["msg"]
    if callable(msg):
        text = msg(text)
    elif msg is not None:
        text = msg
    if path:
        text += "\n\nThe failure occurred for item " + "".join(f"[{p!r}]" for p in path)
    raise error(text)


def assert_allclose(actual, expected, rtol=None, atol=None, equal_nan=True, msg=""):
    """Deprecated in torch: ``assert_close`` without the dtype check."""
    if not isinstance(expected, ember.Tensor):
        expected = ember.as_tensor(expected, dtype=actual.dtype)
    assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan,
                 check_dtype=False, msg=msg or None)


def make_tensor(*shape, dtype, device=None, low=None, high=None, requires_grad=False,
                noncontiguous=False, exclude_zero=False, memory_format=None):
    """A tensor of ``shape`` with values drawn uniformly from [low, high) (defaults by dtype:
    [-9, 9] for numbers, [0, 10) for unsigned, both values for bool).

    Example:
        >>> ember.testing.make_tensor(2, 3, dtype=ember.float32).shape
        torch.Size([2, 3])
    """
    shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    dt = _dtype.to_dtype(dtype)
    if dt is _dtype.bool_:
        t = ember.randint(0, 2, shape, device=device).bool()
    elif dt.category == _dtype._INT:
        lo = 0 if dt.name.startswith("uint") else -9 if low is None else low
        lo = lo if low is None else math.ceil(low)
        hi = 10 if high is None else math.ceil(high)
        t = ember.randint(lo, max(hi, lo + 1), shape, device=device, dtype=dt)
    else:
        lo, hi = -9.0 if low is None else low, 9.0 if high is None else high
        base = ember.float64 if dt.category == _dtype._FLOAT else ember.complex128
        t = (ember.rand(shape, dtype=base, device=device) * (hi - lo) + lo).to(dt)
    if exclude_zero:
        t = ember.where(t == 0, ember.ones((), dtype=dt, device=device), t)
    if noncontiguous and t.numel() > 1:
        t = ember.repeat_interleave(t, 2, dim=-1)[..., ::2]
    elif memory_format is not None:
        t = t.contiguous(memory_format=memory_format)
    return t.requires_grad_(True) if requires_grad else t
