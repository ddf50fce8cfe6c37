"""Type promotion as torch does it: the operands of an op cast to the promoted dtype (Python
and NumPy scalars weak, integer scalars wrapped into range), and float16/bfloat16 ops computed
in float32 ("opmath") with the result rounded once."""
import numpy as np

from .._C import kernels as _C_kernels
from .. import _dtype
from .._backends import MetaBackend
from .._tensor import Tensor

meta_empty = MetaBackend.empty


# NOTE: torch casts a Python scalar to a low-precision tensor's dtype before the op (x_f16 * 0.1
# multiplies by float16(0.1)); NumPy would keep it in float64 where a forward computes with it
# outside a ufunc, and ml_dtypes' ufuncs let it upcast bf16/fp8. So it is pinned.
_PIN_SCALARS = frozenset((_dtype.float16, _dtype.bfloat16, _dtype.float8_e4m3fn, _dtype.float8_e5m2,
                          _dtype.float8_e4m3fnuz, _dtype.float8_e5m2fnuz, _dtype.float8_e8m0fnu))


# NOTE: torch's kernels compute these in float32 ("opmath") and round the result once, so
# ``x_f16 * 0.1`` multiplies by 0.1f, not by 0.1 rounded to float16, and a composite forward
# (sigmoid, gelu, rsqrt...) rounds no intermediate value.
_OPMATH = frozenset((_dtype.float16, _dtype.bfloat16))
_OPMATH_NP = np.dtype(np.float32)


def _promote(opdef, args, arrays, meta=False, kwargs=None):
    """Cast the operands to torch's promoted dtype (scalars stay Python numbers: NumPy treats
    them as weak, as torch does). Returns the dtype to round the result to when the op computes
    a float16/bfloat16 result in float32 (see ``_OPMATH``), else None."""
    mode = opdef.promote if type(opdef.promote) is str else opdef.promote(args, kwargs or {})
    idx = opdef.promote_args
    ops = []
    for i in idx:
        if i < len(args):
            a = args[i]
            ops.extend(a) if type(a) in (list, tuple) else ops.append(a)
    ts = [a for a in ops if isinstance(a, Tensor)]
    if not ts:
        return None
    dt0 = ts[0].dtype
    same = all(t.dtype is dt0 for t in ts)
    scalars = [a for a in ops if type(a) in (int, float, bool, complex)]
    if len(ts) + len(scalars) < len(ops):
        scalars += _numpy_scalars(args, arrays, idx)
    if same and not scalars:
        dt = dt0
    else:
        dims = [t.dtype for t in ts if t._data.ndim]
        zeros = [t.dtype for t in ts if not t._data.ndim]
        dt = _dtype.result_type_of(dims, zeros, [_dtype._scalar_dtype(s) for s in scalars])
    if mode == "float" and dt.category < _dtype._FLOAT:
        dt = _dtype.get_default_dtype()
    if dt in _OPMATH and opdef.opmath and not meta:
        _to_opmath(opdef, arrays, idx, dt.np)
        return dt
    if scalars and dt in _PIN_SCALARS:
        for i in idx:
            if i < len(args) and type(arrays[i]) in (int, float, bool):
                arrays[i] = dt.np.type(arrays[i])
    elif scalars and dt.category == _dtype._INT:
        _wrap_int_scalars(arrays, idx, dt)
    if not same or dt is not dt0:
        npdt = dt.np
        # a cast on the meta device must not materialize the stride-0 array
        cast = (lambda x: x.astype(npdt)) if not meta else (lambda x: meta_empty(x.shape, npdt))
        for i in idx:
            a = arrays[i] if i < len(arrays) else None
            if hasattr(a, "astype") and a.dtype != npdt:
                arrays[i] = cast(a)
            elif type(a) is list:
                arrays[i] = [cast(x) if x.dtype != npdt else x for x in a]
    return None


def _to_opmath(opdef, arrays, idx, npdt):
    """Operands of a float16/bfloat16 op in float32, each first cast to the result dtype as
    torch's loop does (so a Python scalar is rounded to float16 first), except a scalar
    operand after the first of an ``opmath="scalar"`` op, which torch's mul, div and lerp
    read in float32."""
    for i in idx:
        a = arrays[i] if i < len(arrays) else None
        if hasattr(a, "astype"):
            if a.dtype != _OPMATH_NP:
                arrays[i] = _C_kernels.astype(a if a.dtype == npdt else a.astype(npdt), _OPMATH_NP)
        elif type(a) in (int, float) and (i == 0 or opdef.opmath != "scalar"):
            arrays[i] = float(npdt.type(a))     # a weak Python float: it stays float32


def _round_opmath(res, dt):
    """An opmath forward's float32 result(s) rounded once to ``dt``."""
    if type(res) is tuple:
        return tuple(_round_opmath(r, dt) for r in res)
    return _C_kernels.astype(res, dt.np) if res.dtype == _OPMATH_NP else res


def _numpy_scalars(args, arrays, idx):
    # NOTE: torch reads NumPy scalars as Python numbers (t_float32 * np.float64(2) stays
    # float32); NumPy would let them promote like arrays.
    out = []
    for i in idx:
        if i < len(args) and isinstance(args[i], np.generic):
            arrays[i] = args[i].item()
            out.append(arrays[i])
    return out


_INT_BOUNDS = {d: (int(np.iinfo(d.np).min), int(np.iinfo(d.np).max)) for d in _dtype.ALL
               if d.category == _dtype._INT}


def _int_keeps(dt, s):
    """Whether Python number ``s`` leaves integer dtype ``dt`` as it is: an int in its range
    (out of range it wraps, below; a float makes the result float)."""
    bounds = _INT_BOUNDS.get(dt)
    return bounds is not None and type(s) is int and bounds[0] <= s <= bounds[1]


def _wrap_int_scalars(arrays, idx, dt):
    # NOTE: torch casts an out-of-range Python int to the tensor's dtype with wrap-around
    # (uint8 + 300 adds 44); NumPy 2 raises OverflowError instead.
    lo, hi = _INT_BOUNDS[dt]
    for i in idx:
        a = arrays[i] if i < len(arrays) else None
        if type(a) is int and not lo <= a <= hi:
            arrays[i] = np.array(a).astype(dt.np)[()]
