"""Direct calls into the BLAS NumPy already loaded, for what ``numpy.matmul`` cannot say.

``matmul`` always overwrites its output. A stride-1 convolution is a sum of one small GEMM per
kernel tap over shifted views of the same input (no im2col copy), and summing those in NumPy
costs a full pass over the output per tap; BLAS's ``beta=1`` accumulates for free. This module
finds ``cblas_?gemm`` in NumPy's own OpenBLAS (or MKL, when that is what NumPy links) with
ctypes. Where no such library is found (NumPy on Accelerate, say) ``gemm`` is ``None`` and
callers keep their NumPy path.
"""
import ctypes
import os

import numpy as np

from .._C import kernels
from .._C.kernels import ptr     # (for the callers of lapack()'s functions too)

# symbol names used by NumPy's wheels (scipy-openblas, ILP64), older wheels, and plain builds
_SYMBOLS = (("scipy_cblas_{}gemm64_", ctypes.c_int64), ("cblas_{}gemm64_", ctypes.c_int64),
            ("cblas_{}gemm", ctypes.c_int))
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112


def _candidates():
    from .._config import _loaded_libraries     # (what the thread settings look through too)
    libs = _loaded_libraries()
    yield from sorted(p for p in libs if "blas" in os.path.basename(p).lower() or
                      "mkl_rt" in os.path.basename(p).lower())


def _load():
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for pattern, int_t in _SYMBOLS:
            fns = {}
            for ch, scalar in (("s", ctypes.c_float), ("d", ctypes.c_double)):
                fn = getattr(lib, pattern.format(ch), None)
                if fn is None:
                    break
                fn.restype = None
                fn.argtypes = [ctypes.c_int] * 3 + [int_t] * 3 + [
                    scalar, ctypes.c_void_p, int_t, ctypes.c_void_p, int_t, scalar,
                    ctypes.c_void_p, int_t]
                fns[np.dtype(ch.replace("s", "f4").replace("d", "f8"))] = fn
            if len(fns) == 2:
                global library, _ilp64, _symbol
                library, _ilp64, _symbol = path, int_t is ctypes.c_int64, pattern
                return fns
    return None


_fns = False
_ilp64 = False
library = None      # the path of the library ``gemm`` calls into, once found
_symbol = None      # the name pattern its cblas_?gemm was found under (``_SYMBOLS``)


def _row_major(a):
    """(transposed?, leading dim) to pass ``a`` as a row-major BLAS matrix, or None."""
    s0, s1 = (s // a.itemsize for s in a.strides)
    if s1 == 1 and s0 >= max(1, a.shape[1]):
        return _NO_TRANS, s0
    return (_TRANS, s1) if s0 == 1 and s1 >= max(1, a.shape[0]) else None


def gemm(a, b, out, beta=0.0):
    """``out = a @ b + beta * out`` for 2-D float32/float64 NumPy arrays of one dtype, where
    ``a`` and ``b`` may be any views with one unit stride and ``out`` is C-contiguous.
    Returns False (touching nothing) where BLAS is not available for them."""
    global _fns
    if _fns is False:
        _fns = _load()
    fn = _fns and _fns.get(out.dtype)
    if not fn or a.dtype != out.dtype or b.dtype != out.dtype or not out.flags.c_contiguous:
        return False
    la, lb = _row_major(a), _row_major(b)
    if la is None or lb is None:
        return False
    (m, k), n = a.shape, b.shape[1]
    fn(_ROW_MAJOR, la[0], lb[0], m, n, k, 1.0, ptr(a), la[1], ptr(b), lb[1],
       beta, ptr(out), max(1, n))
    return True


def available():
    """Whether ``gemm`` reaches a BLAS in this process."""
    global _fns
    if _fns is False:
        _fns = _load()
    return bool(_fns)


def pointer(dtype):
    """``(address, ilp64)`` of the BLAS ``cblas_?gemm`` for ``dtype`` (ilp64: it takes 64-bit
    ints), for C kernels that call it themselves; None where there is none."""
    import ctypes
    if not available() or np.dtype(dtype) not in _fns:
        return None
    return ctypes.cast(_fns[np.dtype(dtype)], ctypes.c_void_p).value, _ilp64


_LAPACK = {}


def lapack(name, dtype, *argtypes):
    """``LAPACKE_?name`` (``cblas_?name`` for a ``cblas_`` name) in the library ``gemm`` found,
    named as its ``cblas_?gemm`` is, for ``dtype``, its ``argtypes`` with ``int`` the library's
    and ``float`` the dtype's real; None where there is none, or with ``EMBER_NO_C=1`` (the
    NumPy reference path runs)."""
    fn = _LAPACK.get((name, dtype), False)      # (keyed as called: np.dtype(dtype) costs a µs)
    if fn is False:
        fn = _LAPACK[name, dtype] = _find_lapack(name, np.dtype(dtype), argtypes)
    return None if kernels._off else fn


def _find_lapack(name, dtype, argtypes):
    ch = {"f4": "s", "f8": "d", "c8": "c", "c16": "z"}.get(dtype.str[1:])
    if ch is None or not available():
        return None
    lib, symbol = ctypes.CDLL(library), _symbol.format(ch).replace("gemm", name.replace(
        "cblas_", ""))
    # NOTE: torch calls LAPACK itself, so a NaN goes through the factorization; LAPACKE's
    # NaN check would skip the call instead (geqrf's input came back unfactored)
    nancheck = _symbol.format("").replace("cblas_gemm", "LAPACKE_set_nancheck")
    if nancheck := getattr(lib, nancheck, None):
        nancheck(0)
    fn = getattr(lib, symbol if name.startswith("cblas_") else symbol.replace("cblas_", "LAPACKE_"),
                 None)
    if fn is not None:
        int_t = ctypes.c_int64 if _ilp64 else ctypes.c_int
        fn.argtypes = [int_t if t is int else (ctypes.c_float if ch in "sc" else ctypes.c_double)
                       if t is float else t for t in argtypes]
        fn.restype = int_t
    return fn
