"""Scaled dot-product attention for short key sequences: every head in one C call.

At GPT sizes (64 heads, sequence 64) the tiled kernels of ``_attention.py`` spend most of their
time in Python and NumPy between tiny GEMMs. ``attn_small_fwd`` / ``attn_small_bwd``
(``ember/_C/kernels/attention_small.h``) run the whole forward or backward in C, calling BLAS
themselves, and read q, k, v where they lie: any head layout whose rows have unit column
stride (the ``(B, L, H, d)`` views a fused qkv projection gives) goes in without a copy, and
out, dq, dk, dv come back in their input's memory order, as torch's CPU flash attention does.

Both return None where they do not apply (no compiled kernels or BLAS, dtypes other than
float32/float64, empty dims); ``_attention._FlashAttention`` then runs its other paths, and
its ember-op reference (``_forward_ops``/``_backward_ops``) is what these are tested against.
"""
import math

import numpy as np

from .._C import kernels
from .._backends import blas
from .._storage import _root

MAX_KEYS = 1024     # keys per head up to which this path runs (2 x 32 x keys per thread)
# Longer keys, where threads outnumber the key/value heads, up to this: threads then split the
# query blocks (the tiled path's BLAS threads and kernel threads, woken in turn per tile, gain
# nothing from a second thread on long sequences; 1 thread keeps the tiled path).
MAX_SPLIT_KEYS = 16384


def applies(q, k, v):
    """Whether the kernels run on these arrays (heads..., rows, cols)."""
    return (type(q) is np.ndarray and type(k) is np.ndarray and type(v) is np.ndarray and
            q.dtype == k.dtype == v.dtype and 0 < k.shape[-2] and
            (k.shape[-2] <= MAX_KEYS or _split(k)) and
            min(q.shape[-2], q.shape[-1], v.shape[-1]) > 0 and
            kernels.kernel("attn_small_fwd", q.dtype) is not None and _gemm(q.dtype) is not None)


def _split(k):
    """Whether keys beyond MAX_KEYS run here: threads outnumber the key/value heads."""
    nt = kernels.num_threads()
    return k.shape[-2] <= MAX_SPLIT_KEYS and nt > 1 and math.prod(k.shape[:-2]) < nt


def _gemm(dtype):
    """``blas.pointer(dtype)``, looked up once per dtype."""
    if dtype not in _GEMM:
        _GEMM[dtype] = blas.pointer(dtype)
    return _GEMM[dtype]


_GEMM = {}


def _readable(a):
    """``a`` as it is where BLAS can read it (unit column stride, rows at least a row apart),
    else a contiguous copy."""
    item, (rows, cols) = a.itemsize, a.shape[-2:]
    ld = a.strides[-2] if rows > 1 else cols * item
    if (a.strides[-1] != item and cols > 1) or ld % item or ld < max(1, cols) * item or \
            any(s % item for s in a.strides[:-2]):
        return np.ascontiguousarray(a)
    return a


def _geometry(arrays):
    """(per-head element offsets, one row per array; row strides) of the kernel's operands,
    which only their shapes and strides decide."""
    nq = math.prod(arrays[0].shape[:-2])
    off, ld = np.zeros((len(arrays), nq), np.int64), np.zeros(len(arrays), np.int64)
    for i, a in enumerate(arrays):
        item, (rows, cols) = a.itemsize, a.shape[-2:]
        if (a.strides[-1] != item and cols > 1) or (rows > 1 and a.strides[-2] < cols * item):
            raise AssertionError(f"attn_small: output strides {a.strides} not writable")
        o = np.zeros((), np.int64)
        for n, st in zip(a.shape[:-2], a.strides[:-2]):   # stride 0 (expanded) heads are fine
            o = o[..., None] + np.arange(n, dtype=np.int64) * (st // item)
        off[i, :o.size] = o.ravel()
        ld[i] = max(1, a.strides[-2] // item if rows > 1 else cols)
    return off, ld


# NOTE: the geometry of a model's calls repeats every step; building it (a dozen small NumPy
# calls per operand) had cost more than the GPT's attention arithmetic.
_GEOMETRIES = {}


def _like(a, cols):
    """An empty array shaped as ``a`` with ``cols`` columns, in ``a``'s memory order (as torch
    returns), or C order where that order would not give unit column stride."""
    out = np.empty_like(a, shape=a.shape[:-1] + (cols,))
    return out if cols <= 1 or out.strides[-1] == out.itemsize else np.empty(out.shape, a.dtype)


def _fused_grads(q, k, v):
    """dq, dk, dv as the same slices of one new array where q, k, v are disjoint slices that
    fill one C-contiguous array (a fused qkv projection's output, split): split's backward
    then joins them without a copy (``_ops/joining.py``). None elsewhere."""
    r = _root(q)
    if not (_root(k) is r and _root(v) is r and r.flags.c_contiguous and r.dtype == q.dtype and
            q.shape == k.shape == v.shape and q.strides == k.strides == v.strides and
            r.size == 3 * q.size):
        return None
    try:
        if any(np.shares_memory(a, b, max_work=1000) for a, b in ((q, k), (q, v), (k, v))):
            return None
    except np.exceptions.TooHardError:
        return None
    buf, at = np.empty(r.size, r.dtype), r.__array_interface__["data"][0]
    return [np.ndarray(a.shape, a.dtype, buf, a.__array_interface__["data"][0] - at, a.strides)
            for a in (q, k, v)]


def _run(name, inputs, outputs, lse, scale, causal):
    arrays = [_readable(a) for a in inputs] + list(outputs)
    q, k = arrays[:2]
    key = (q.itemsize,) + tuple((a.shape, a.strides) for a in arrays)
    geometry = _GEOMETRIES.get(key)
    if geometry is None:
        if len(_GEOMETRIES) > 256:
            _GEOMETRIES.clear()
        geometry = _GEOMETRIES[key] = _geometry(arrays)
    off, ld = geometry
    nq, nkv = math.prod(q.shape[:-2]), math.prod(k.shape[:-2])
    base = np.array([a.__array_interface__["data"][0] for a in arrays], np.uintp)
    gemm, ilp64 = _gemm(q.dtype)
    # each OpenMP thread calls BLAS on its own heads
    status = kernels.with_one_blas_thread(
        kernels.kernel(name, q.dtype), base.ctypes.data, off.ctypes.data, ld.ctypes.data,
        lse.ctypes.data, nkv, nq // nkv, q.shape[-2], k.shape[-2], q.shape[-1],
        arrays[2].shape[-1], scale, 0 if causal else k.shape[-2], gemm, ilp64)
    if status != 0:
        raise MemoryError("scaled_dot_product_attention: cannot allocate the kernel's buffers")


def forward(q, k, v, scale, causal):
    """``(out, lse)`` with ``lse`` shaped ``q.shape[:-1]``, or None where the kernel does not
    apply."""
    if not applies(q, k, v):
        return None
    out, lse = _like(q, v.shape[-1]), np.empty(q.shape[:-1], q.dtype)
    _run("attn_small_fwd", (q, k, v), (out,), lse, scale, causal)
    return out, lse


def backward(g, q, k, v, out, lse, scale, causal):
    """``(dq, dk, dv)`` of :func:`forward` for the output gradient ``g``, or None."""
    if not applies(q, k, v) or g.dtype != q.dtype or out.dtype != q.dtype:
        return None
    grads = _fused_grads(q, k, v) or [_like(a, a.shape[-1]) for a in (q, k, v)]
    lse = np.ascontiguousarray(lse, q.dtype).reshape(q.shape[:-1])
    _run("attn_small_bwd", (q, k, v, out, g), grads, lse, scale, causal)
    return grads
