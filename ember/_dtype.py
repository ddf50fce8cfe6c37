"""dtypes, the default dtype, and PyTorch's type-promotion rules.

bfloat16 and float8 come from ml_dtypes, so every dtype is a real NumPy dtype and arrays of it
work with NumPy (and CuPy where it supports them). ml_dtypes is imported on first use (it adds
a tenth to ``import ember``): until then those three dtypes have no ``np`` slot, and reading it
imports ml_dtypes (see :func:`ml_dtypes`).
"""
import numpy as np

_BOOL, _INT, _FLOAT, _COMPLEX = 0, 1, 2, 3


class dtype:
    """A tensor element type, like ``torch.dtype``. Compare with ``is`` or ``==``."""

    __slots__ = ("name", "np", "itemsize", "category", "is_signed", "_rank", "__weakref__")

    def __init__(self, name, np_dtype, category, rank, itemsize=None):
        self.name, self.category, self._rank = name, category, rank
        if np_dtype is not None:       # (else ml_dtypes' dtype, set by ml_dtypes())
            self.np = np.dtype(np_dtype)
        self.itemsize = itemsize or self.np.itemsize
        self.is_signed = not name.startswith(("bool", "uint"))

    def __getattr__(self, attr):       # only for a slot not set yet: an ml_dtypes one's np
        if attr == "np" and self in _FROM_ML_DTYPES:
            ml_dtypes()
            return self.np
        raise AttributeError(f"'torch.dtype' object has no attribute '{attr}'")

    is_floating_point = property(lambda self: self.category == _FLOAT)

    is_complex = property(lambda self: self.category == _COMPLEX)

    def to_real(self):
        return {complex64: float32, complex128: float64}.get(self, self)

    def to_complex(self):
        if self.category == _FLOAT and self._rank == 0:
            raise RuntimeError(f"Unknown Complex ScalarType for {_SCALAR_NAMES[self.name]}")
        return complex128 if self in (float64, complex128) else complex64

    def __repr__(self):
        return "torch." + self.name

    def __reduce__(self):
        return (_by_name, (self.name,))


bool_ = dtype("bool", np.bool_, _BOOL, 0)
uint8 = dtype("uint8", np.uint8, _INT, 1)
int8 = dtype("int8", np.int8, _INT, 1)
int16 = dtype("int16", np.int16, _INT, 2)
int32 = dtype("int32", np.int32, _INT, 3)
int64 = dtype("int64", np.int64, _INT, 4)
# NOTE: torch's uint16/32/64 are "shell" dtypes: tensors, casts, comparisons, bitwise ops and
# sorting work, but promotion with any other integer type raises (see promote_types)
uint16 = dtype("uint16", np.uint16, _INT, 2)
uint32 = dtype("uint32", np.uint32, _INT, 3)
uint64 = dtype("uint64", np.uint64, _INT, 4)
_SHELL = (uint16, uint32, uint64)
float8_e4m3fn = dtype("float8_e4m3fn", None, _FLOAT, 0, itemsize=1)
float8_e5m2 = dtype("float8_e5m2", None, _FLOAT, 0, itemsize=1)
# the "fnuz" formats (no negative zero, one nan) and e8m0fnu (powers of two: MX scales); as in
# torch, conversions and data movement only
float8_e4m3fnuz = dtype("float8_e4m3fnuz", None, _FLOAT, 0, itemsize=1)
float8_e5m2fnuz = dtype("float8_e5m2fnuz", None, _FLOAT, 0, itemsize=1)
float8_e8m0fnu = dtype("float8_e8m0fnu", None, _FLOAT, 0, itemsize=1)
float8_e8m0fnu.is_signed = False
# NOTE: torch's packed pair of float4 values per byte is a storage dtype: tensors of it are
# made (zeros, empty, a uint8 tensor's view), moved, copied and compared byte for byte, and
# nothing converts to or from it. A 1-byte void NumPy dtype holds it: moves work, math does not.
float4_e2m1fn_x2 = dtype("float4_e2m1fn_x2", "V1", _FLOAT, 0)
float16 = dtype("float16", np.float16, _FLOAT, 1)
bfloat16 = dtype("bfloat16", None, _FLOAT, 1, itemsize=2)
float32 = dtype("float32", np.float32, _FLOAT, 2)
float64 = dtype("float64", np.float64, _FLOAT, 3)
complex64 = dtype("complex64", np.complex64, _COMPLEX, 2)
complex128 = dtype("complex128", np.complex128, _COMPLEX, 3)
_FROM_ML_DTYPES = (float8_e4m3fn, float8_e5m2, float8_e4m3fnuz, float8_e5m2fnuz, float8_e8m0fnu,
                   bfloat16)


def is_ml_dtypes(np_dtype):
    """Whether a NumPy dtype is one of ml_dtypes' (bfloat16, the float8s) without importing it:
    NumPy's own floats have no 1-byte one and none of kind "V" (not ``np_dtype.name``, which
    NumPy computes in Python)."""
    kind = np_dtype.kind
    return kind == "V" or kind == "f" and np_dtype.itemsize == 1


_ml_dtypes = []     # [the module] once imported


def ml_dtypes():
    """The ml_dtypes module, imported on the first call, which also gives bfloat16 and the
    float8 dtypes their ``np`` and makes their arrays known to :func:`from_numpy_dtype`."""
    if not _ml_dtypes:
        import ml_dtypes as m
        for d in _FROM_ML_DTYPES:
            d.np = np.dtype(getattr(m, d.name))
            _BY_NP[d.np] = d
        _ml_dtypes.append(m)
    return _ml_dtypes[0]


def cast(a, np_dtype):
    """``a.astype(np_dtype)`` (a NumPy or CuPy array), with torch's saturation for float8_e4m3fn.

    NOTE: torch rounds a real number beyond float8_e4m3fn's range (+-448), infinities included,
    to +-448; ml_dtypes makes it nan (e4m3fn has no infinity). nan stays nan."""
    if _ml_dtypes and np_dtype == float8_e4m3fn.np and a.dtype.kind in "fV" and \
            a.dtype != np_dtype:      # (before ml_dtypes loads, no dtype is float8_e4m3fn's)
        a = a.astype(np.float32).clip(-448.0, 448.0)
    if _ml_dtypes and np_dtype == float8_e8m0fnu.np and a.dtype != np_dtype:
        return _to_e8m0(a)
    if (a.dtype == float4_e2m1fn_x2.np) != (np.dtype(np_dtype) == float4_e2m1fn_x2.np):
        raise NotImplementedError("\"copy_kernel\" not implemented for 'Float4_e2m1fn_x2'")
    if type(a) is np.ndarray and a.dtype.kind == "f":    # float16 <-> float32 by F16C
        global _kernels
        if _kernels is None:
            from ._C import kernels as _kernels
        d = np.dtype(np_dtype)
        if is_ml_dtypes(d):     # (a double past float's range: torch converts it silently)
            with np.errstate(over="ignore"):
                return _kernels.astype(a, d)
        return _kernels.astype(a, d)
    return a.astype(np_dtype)


def _to_e8m0(a):
    """torch's float -> float8_e8m0fnu: the float32 exponent, rounded to nearest (ties to even
    on the implied bit) and the sign dropped; nan and inf become nan.

    NOTE: ml_dtypes makes a negative number or 0 nan, and rounds float32 denormals by value
    (torch gives 2^-126 above 2^-127)."""
    with np.errstate(over="ignore"):     # (a double past float's range is inf, so nan)
        bits = a.astype(np.float32).view(np.uint32)
    e = (bits >> 23) & 0xFF
    up = ((bits & 0x400000) != 0) & (((bits & 0x3FFFFF) != 0) | (e > 0)) & (e != 0xFF)
    return (e + up).astype(np.uint8).view(float8_e8m0fnu.np)


_kernels = None     # ember._C.kernels once a float array is cast (not at import: it loads ctypes)


ALL = (bool_, uint8, int8, int16, int32, int64, uint16, uint32, uint64, float8_e4m3fn,
       float8_e5m2, float8_e4m3fnuz, float8_e5m2fnuz, float8_e8m0fnu, float16, bfloat16,
       float32, float64, complex64, complex128)
ALIASES = {"bool": bool_, "half": float16, "float": float32, "double": float64, "short": int16,
           "int": int32, "long": int64, "cfloat": complex64, "cdouble": complex128,
           "float16": float16, "bfloat16": bfloat16, "float32": float32, "float64": float64}
# torch's C++ ScalarType names, which its error messages use ("Float", "Char", ...)
_SCALAR_NAMES = {"bool": "Bool", "uint8": "Byte", "int8": "Char", "int16": "Short", "int32": "Int",
                 "int64": "Long", "uint16": "UInt16", "uint32": "UInt32", "uint64": "UInt64",
                 "float8_e4m3fn": "Float8_e4m3fn", "float8_e5m2": "Float8_e5m2",
                 "float8_e4m3fnuz": "Float8_e4m3fnuz", "float8_e5m2fnuz": "Float8_e5m2fnuz",
                 "float8_e8m0fnu": "Float8_e8m0fnu", "float4_e2m1fn_x2": "Float4_e2m1fn_x2",
                 "float16": "Half", "bfloat16": "BFloat16", "float32": "Float", "float64": "Double",
                 "complex64": "ComplexFloat", "complex128": "ComplexDouble"}
_BY_NAME = {d.name: d for d in ALL}
_BY_NP = {d.np: d for d in ALL if d not in _FROM_ML_DTYPES}     # (they join in ml_dtypes())
# (float4_e2m1fn_x2 is left out of ALL, which lists the dtypes that convert and compute)
_BY_NAME[float4_e2m1fn_x2.name], _BY_NP[float4_e2m1fn_x2.np] = float4_e2m1fn_x2, float4_e2m1fn_x2


def _by_name(name):
    return _BY_NAME[name]


def from_numpy_dtype(np_dtype):
    """The ember dtype of a NumPy dtype; TypeError for one torch has no twin of."""
    try:
        return _BY_NP[np_dtype]
    except KeyError:
        d = np.dtype(np_dtype)
        if is_ml_dtypes(d) and not _ml_dtypes:     # an array made before ember used them
            ml_dtypes()
        if d in _BY_NP:
            return _BY_NP[d]
        raise TypeError(f"can't convert np.ndarray of type numpy.{d.type.__name__}. The only "
                        f"supported types are: float64, float32, float16, complex64, complex128, "
                        f"int64, int32, int16, int8, uint8, and bool.") from None


def to_dtype(d):
    """Accept an ember dtype, a NumPy dtype, a Python type or a name; return an ember dtype."""
    if isinstance(d, dtype):
        return d
    if d is float:
        return _default[0]
    if d is int:
        return int64
    if d is bool:
        return bool_
    if d is complex:
        return _default[0].to_complex()
    if isinstance(d, str):
        d = d.removeprefix("torch.")
        if d in ALIASES:
            return ALIASES[d]
        if d in _BY_NAME:
            return _BY_NAME[d]
    return from_numpy_dtype(d)


_default = [float32]


def get_default_dtype():
    """The dtype Python floats become (``float32`` unless changed)."""
    return _default[0]


def set_default_dtype(d):
    """Set the dtype of Python floats in new tensors; only floating dtypes are allowed.

    Example:
        >>> import ember
        >>> ember.set_default_dtype(ember.float64); ember.tensor([1.5]).dtype
        torch.float64
        >>> ember.set_default_dtype(ember.float32)
    """
    d = to_dtype(d)
    if d not in (float16, bfloat16, float32, float64):
        raise TypeError(f"only floating-point types are supported as the default type, got {d}")
    _default[0] = d


def promote_types(a, b):
    """The smallest dtype both ``a`` and ``b`` convert to without losing category.

    Example:
        >>> import ember
        >>> ember.promote_types(ember.uint8, ember.int8)
        torch.int16
    """
    if a is b:
        return a
    if a.category == _FLOAT and a._rank == 0 or b.category == _FLOAT and b._rank == 0:
        raise RuntimeError(f"Promotion for Float8 Types is not supported, attempted to promote "
                           f"{_SCALAR_NAMES[a.name]} and {_SCALAR_NAMES[b.name]}")
    ca, cb = a.category, b.category
    if (a in _SHELL or b in _SHELL) and _FLOAT not in (ca, cb):
        raise RuntimeError("Promotion for uint16, uint32, uint64 types is not supported, "
                           f"attempted to promote {_SCALAR_NAMES[a.name]} and "
                           f"{_SCALAR_NAMES[b.name]}")
    if ca < cb or (ca == cb and a._rank < b._rank):
        a, b, ca, cb = b, a, cb, ca                      # a is now the "bigger" one
    if ca == _COMPLEX:
        return complex128 if a is complex128 or b is float64 else complex64
    if ca == _FLOAT:
        if cb == _FLOAT and a._rank == b._rank:       # float16 with bfloat16
            return float32
        return a
    if ca == _INT and cb == _INT and a._rank == b._rank:  # uint8 with int8
        return int16
    return a


def _scalar_dtype(x):
    if isinstance(x, bool):
        return bool_
    if isinstance(x, int):
        return int64
    if isinstance(x, float):
        return _default[0]
    return _default[0].to_complex() if isinstance(x, complex) else None


def _combine(higher, lower):
    # NOTE: torch's category rule: a lower-priority operand (0-dim tensor, Python scalar) only
    # changes the result when it is of a higher category (bool < int < float < complex).
    if higher is None:
        return lower
    if lower is None or higher.category == _COMPLEX:
        return higher
    if lower.category == _COMPLEX:
        return higher.to_complex() if higher.category == _FLOAT else lower
    if higher.category == _FLOAT:
        return higher
    return promote_types(higher, lower) if higher is bool_ or lower.category == _FLOAT else higher


def result_type_of(dims, zeros, scalars):
    """Result dtype from the dtypes of >0-dim tensors, 0-dim tensors and Python scalars."""
    def fold(ds):
        r = None
        for d in ds:
            r = d if r is None else promote_types(r, d)
        return r
    return _combine(fold(dims), _combine(fold(zeros), fold(scalars)))


class finfo:
    """Machine limits of a floating dtype, like ``torch.finfo``."""

    def __init__(self, type=None):
        d = to_dtype(type or _default[0])
        if d.category == _COMPLEX:
            d = d.to_real()
        if d.category != _FLOAT:
            raise TypeError("torch.finfo() requires a floating point input type. Use torch.iinfo "
                            "to handle 'torch.finfo'")
        f = ml_dtypes().finfo(d.np)
        self.dtype, self.bits = d.name, d.itemsize * 8
        self.eps, self.max, self.min = float(f.eps), float(f.max), float(f.min)
        if d is float8_e5m2fnuz:    # NOTE: torch's epsilon for it is 2^-3 (ml_dtypes: 2^-2)
            self.eps = 0.125
        self.tiny = self.smallest_normal = float(f.smallest_normal)
        # NOTE: torch's resolution is 10 ** -digits10 (std::numeric_limits), which is 1 for
        # float8 where ml_dtypes' ``precision`` says 0.1.
        self.resolution = 10.0 ** -int(np.floor(-np.log10(self.eps)))

    def __repr__(self):
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, "
                f"eps={self.eps:g}, smallest_normal={self.tiny:g}, tiny={self.tiny:g}, "
                f"dtype={self.dtype})")


class iinfo:
    """Machine limits of an integer dtype, like ``torch.iinfo``."""

    def __init__(self, type):
        d = to_dtype(type)
        if d is bool_:
            raise TypeError("torch.bool is not supported by torch.iinfo")
        if d.category != _INT:
            raise TypeError("torch.iinfo() requires an integer input type. Use torch.finfo to "
                            "handle 'torch.iinfo'")
        i = np.iinfo(d.np)
        self.dtype, self.bits, self.max, self.min = d.name, d.itemsize * 8, int(i.max), int(i.min)

    def __repr__(self):
        return f"iinfo(min={self.min:g}, max={self.max:g}, dtype={self.dtype})"
