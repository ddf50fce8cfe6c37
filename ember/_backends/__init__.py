"""Backends: the only code that touches arrays. One per device type.

A backend names its array module (``xp``) and knows how to build arrays on its device and move
them to and from the host. Op forwards are written once against ``xp``.
"""
import numpy as np

from .._device import CPU, META, device
from .._sparse import SparseData, SparseOperand
from .malloc import tune as _tune_malloc

_tune_malloc()          # keep a training step's arrays mapped between steps (see malloc.py)


class NumpyBackend:
    """The cpu device: NumPy arrays."""

    name = "cpu"
    xp = np

    def asarray(self, obj, np_dtype=None, device=None):
        return np.asarray(obj, dtype=np_dtype)

    def to_host(self, arr):
        return arr

    def from_host(self, arr, device, non_blocking=False):
        return arr

    def run(self, opdef, arrays, kwargs):
        return opdef.fwd(np, *arrays, **kwargs)


class MetaBackend:
    """The meta device: arrays with every stride 0 over a single element, so views and shape
    logic run through NumPy while no memory of the full size is ever allocated."""

    name = "meta"
    xp = np

    @staticmethod
    def empty(shape, np_dtype):
        return np.broadcast_to(np.zeros((), np_dtype), tuple(shape))

    def asarray(self, obj, np_dtype=None, device=None):
        a = np.asarray(obj, dtype=np_dtype)
        return self.empty(a.shape, a.dtype)

    def to_host(self, arr):
        raise NotImplementedError("Cannot copy out of meta tensor; no data!")

    def from_host(self, arr, device, non_blocking=False):
        return self.empty(arr.shape, arr.dtype)

    def run(self, opdef, arrays, kwargs):
        for a in arrays:      # a meta rule reads only shapes: it would take a sparse operand
            if isinstance(a, SparseData):
                raise SparseOperand()
        if opdef.meta is not None:
            return opdef.meta(*arrays, **kwargs)
        # NOTE: ops without a meta rule run their forward on the stride-0 arrays; the values are
        # meaningless but shape and dtype are the real ones. Results are re-made as stride 0.
        with np.errstate(all="ignore"):
            out = opdef.fwd(np, *arrays, **kwargs)
        if isinstance(out, tuple):
            return tuple(self.empty(np.shape(o), np.asarray(o).dtype) for o in out)
        return self.empty(np.shape(out), np.asarray(out).dtype)


_NUMPY, _META = NumpyBackend(), MetaBackend()
_cuda = None


def backend(device):
    """The backend object of a device."""
    t = device.type
    if t == "cpu":
        return _NUMPY
    if t == "meta":
        return _META
    global _cuda
    if _cuda is None:
        from .cupy_backend import CupyBackend   # loads cupy on first use only
        _cuda = CupyBackend()
    return _cuda


def device_of_array(arr):
    """The device an array lives on: NumPy arrays are cpu, the cuda backend's cuda:N."""
    if isinstance(arr, (np.ndarray, np.generic)) or _cuda is None or \
            not isinstance(arr, _cuda.xp.ndarray):
        return CPU
    return device("cuda", arr.device.id)


def array_module(arr):
    """The array module (``xp``) that computes on ``arr``: NumPy for cpu (and meta) arrays,
    the cuda backend's for a cuda array; for code handed bare arrays (the optimizers' math)."""
    return np if isinstance(arr, (np.ndarray, np.generic)) else backend(device_of_array(arr)).xp


__all__ = ["array_module", "backend", "device_of_array", "CPU", "META"]


def _numpy_errstate():
    """NumPy 2's error-state context variable and its all-ignore value, under which the C path
    calls ufuncs and ``quietly`` runs (``np_errstate`` None on NumPy 1: private names that
    may move)."""
    try:
        from numpy._core import umath
        return {"np_errstate": umath._extobj_contextvar,
                "np_ignore": umath._make_extobj(all="ignore")}
    except (ImportError, AttributeError, TypeError):
        return {"np_errstate": None, "np_ignore": None}


NUMPY_ERRSTATE = _numpy_errstate()


def quietly(fn, *args):
    """``fn(*args)`` under ``np.errstate(all="ignore")``, through the context variable itself
    where NumPy 2 has one: the context manager would cost more than a small op itself."""
    var = NUMPY_ERRSTATE["np_errstate"]
    if var is None:
        with np.errstate(all="ignore"):
            return fn(*args)
    token = var.set(NUMPY_ERRSTATE["np_ignore"])
    try:
        return fn(*args)
    finally:
        var.reset(token)


def add_at(xp, out, index, values):
    """``out[index] += values`` with repeated indices accumulating (np.add.at; CuPy spells it
    cupyx.scatter_add)."""
    if xp is np:
        if not add_flat(out, index, values) and not _add_rows(out, index, values):
            np.add.at(out, index, values)
    else:
        import cupyx
        cupyx.scatter_add(out, index, values)


def add_flat(out, index, values, add=True):
    """``np.add.at(out, index, values)`` (``out[index] = values`` when not ``add``) for a 1-D
    float ``out`` and a long int64 index by the C scatter kernel, in index order: sums round
    as add.at's, and of repeated indices the last write wins, as in NumPy (faster than add.at;
    the assignment is level with NumPy's, but needs no range check first). False (nothing written) for any other case, or a negative or out-of-range index:
    the kernel checks them all before it writes, and NumPy then wraps or raises."""
    if type(index) is tuple and len(index) == 1:
        index = index[0]
    if type(index) is not np.ndarray or index.ndim != 1 or index.size < 4096 or \
            not out.flags.c_contiguous or np.may_share_memory(out, values):
        return False
    from .._C import kernels
    return kernels.scatter(out, 0, index, values, int(add), out)


def _add_rows(out, index, values):
    """``np.add.at(out, index, values)`` where one integer array picks rows of ``out`` (an
    embedding's backward), done by sorting: equal rows become runs that one ``add.reduceat``
    sums, faster than ufunc.at. Each row's values are still added in their original order.
    False (nothing done) for any other case."""
    if type(index) is tuple and len(index) == 1:
        index = index[0]
    if type(index) is not np.ndarray or index.dtype.kind not in "iu" or index.size < 32 or \
            out.ndim < 2 or out.dtype.kind not in "fc" or type(values) is not np.ndarray or \
            values.dtype != out.dtype or values.shape != index.shape + out.shape[1:]:
        return False
    flat = index.reshape(-1)
    if _add_rows_kernel(out, flat, values):
        return True
    order = np.argsort(flat, kind="stable")
    rows = flat[order]
    if rows[0] < 0:                 # (negative indices: leave their wrapping to add.at)
        return False
    starts = np.flatnonzero(np.concatenate(([True], rows[1:] != rows[:-1])))
    vals = values.reshape((-1,) + out.shape[1:])[order]
    out[rows[starts]] += np.add.reduceat(vals, starts, axis=0)
    return True


def _add_rows_kernel(out, flat, values, sidx=None, scale=None):
    """``_add_rows`` by the C kernel (gather.h's ``add_rows``: each row added in index order,
    the sums NumPy's bit for bit, without sorting); False where it does not apply or an index
    is negative or out of range (nothing written: add.at then wraps or raises). With ``sidx``
    and ``scale`` the row added for ``flat[i]`` is ``scale[i] * values[sidx[i]]`` (sparse @
    dense)."""
    from .._C import kernels
    fn = kernels.kernel("add_rows", out.dtype)
    if fn is None or not out.flags.c_contiguous or values.dtype != out.dtype or \
            scale is not None and scale.dtype != out.dtype:
        return False
    flat, src = np.ascontiguousarray(flat, np.int64), np.ascontiguousarray(values)
    if sidx is not None:
        sidx, scale = np.ascontiguousarray(sidx, np.int64), np.ascontiguousarray(scale)
    inner = out.size // out.shape[0] if out.shape[0] else 0
    return fn(out.ctypes.data, flat.ctypes.data, src.ctypes.data,
              None if sidx is None else sidx.ctypes.data,
              None if scale is None else scale.ctypes.data, flat.size, out.shape[0],
              src.shape[0] if sidx is not None else flat.size, inner) == 0


def accumulate(xp, ufunc, x, axis):
    """``ufunc.accumulate(x, axis)`` for an associative, commutative ufunc of ``xp`` (maximum,
    minimum, logaddexp). CuPy's ufuncs have no accumulate: there it is a scan in log2(n)
    whole-array steps (Hillis-Steele), each step combining every element with the one
    ``step`` before it."""
    if xp is np:
        return ufunc.accumulate(x, axis=axis)
    out, step = xp.moveaxis(x, axis, -1).copy(), 1
    while step < out.shape[-1]:
        nxt = out.copy()
        nxt[..., step:] = ufunc(out[..., step:], out[..., :-step])
        out, step = nxt, 2 * step
    return xp.moveaxis(out, -1, axis)


def multiply_at(xp, out, index, values):
    """``out[index] *= values`` with repeated indices all applied (``out`` 1-D)."""
    if xp is np:
        return np.multiply.at(out, index, values)
    # CuPy has no multiply.at nor a cupyx.scatter_mul: the k-th repeat of every index is
    # applied in round k, each round one fancy multiply whose indices are all distinct
    index = (index[0] if type(index) is tuple else index).reshape(-1)
    values = xp.broadcast_to(values, index.shape).reshape(-1)
    if not index.size:
        return
    order = xp.argsort(index)
    rows = index[order]
    starts = xp.concatenate((xp.ones(1, bool), rows[1:] != rows[:-1]))
    rank = xp.arange(rows.size) - xp.flatnonzero(starts)[xp.cumsum(starts) - 1]
    for k in range(int(rank.max()) + 1):
        sel = order[rank == k]
        out[index[sel]] *= values[sel]


def max_at(xp, out, index, values):
    """``out[index] = max(out[index], values)`` with repeated indices all applied."""
    if xp is np:
        np.maximum.at(out, index, values)
    else:
        import cupyx
        cupyx.scatter_max(out, index, values)


def min_at(xp, out, index, values):
    """``out[index] = min(out[index], values)`` with repeated indices all applied."""
    if xp is np:
        np.minimum.at(out, index, values)
    else:
        import cupyx
        cupyx.scatter_min(out, index, values)
