"""Batched matrix products through BLAS directly: the kernel ``matmul`` (and so bmm, einsum,
baddbmm, linear) runs beside its NumPy code, which stays the reference and the fallback (CuPy
arrays, complex and integer dtypes, broadcasts that do not flatten, empty products).

``numpy.matmul`` on a stack calls BLAS once per matrix and lets BLAS thread each small GEMM:
with two threads, small products such as attention's run slower than on one. The kernel
(``bmm`` in ember/_C/kernels/gemm.h) splits the batch over OpenMP threads instead, with BLAS on
one thread meanwhile, takes transposed operands as BLAS flags, and broadcasts a 2-D operand as
a batch stride of 0. On one thread ``numpy.matmul`` makes the same BLAS calls with less
overhead than a ctypes call, and 2-D products are one BLAS call that BLAS threads well, so both
stay with NumPy. A stack times a matrix whose batch folds into the rows becomes one large GEMM
at any thread count.

float32 takes ember's own GEMM instead (``gemm`` in ember/_C/kernels/sgemm.h) where it runs,
2-D products and stacks alike: it writes C once (OpenBLAS zeroes it first for beta = 0), packs
a transposed B by register transposes and reads A in place where packing it does not pay,
which is where OpenBLAS lost to torch's MKL on a training step's products. Where it runs:

- on several threads, every float32 product OpenBLAS would thread (above 2^18 multiply-adds),
  on a CPU with AVX-512 or AVX2: OpenBLAS's idle workers spin after each call, 2^28 cycles
  unless ``import ember`` set OPENBLAS_THREAD_TIMEOUT before NumPy loaded it (``import numpy``
  first, as most scripts begin), and starve the OpenMP threads of the row kernels between the
  GEMMs. On ember's threads no other pool competes, and with A packed ember's GEMM is level
  with OpenBLAS's two threads on large products too;
- on one thread, with AVX-512, from 2^19 multiply-adds (a 2-D ``A^T @ B`` too: reading A in
  place, it runs weight gradients in 0.55-0.6 of OpenBLAS's time). With AVX2 only, 2-D
  products of 1024 rows or more and k below 1024 whose A is not transposed (a step's
  activations @ weights, gradients @ weights);
  OpenBLAS's one thread keeps the rest, where it is ahead or level.
The measurements behind these bounds are in docs/performance-log.md.

float64, other CPUs, tiny products and stacks of small products whose B is not transposed keep
BLAS / ``numpy.matmul`` (the bmm kernel pins BLAS to one thread) (docs/kernels.md).
"""
import math

import numpy as np

from .._C import kernels as _C
from .._C.kernels import with_one_blas_thread as _pinned
from .._backends import blas

_NO_T, _T = 111, 112
# multiply-adds below which the kernel would run on one thread (threads_for in kernels.c wants
# 32768 * 1024 per thread): numpy.matmul does that with less overhead, and BLAS may still
# thread a product of the stack that is large on its own
_MIN_WORK = 1 << 25
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_F32 = _DTYPES[0]
# multiply-adds below which ember's GEMM leaves a product to numpy.matmul on one thread: its
# ctypes call costs more than a small product
_MIN_OWN = 1 << 19
# ... and on several, the most it takes: OpenBLAS threads a product above SMP_THRESHOLD_MIN * 4
# multiply-adds
_MIN_OWN_THREADED = 1 << 18
# multiply-adds per product of a stack below which a B not transposed keeps BLAS (see matmul)
_MIN_OWN_EACH = 1 << 20
# rows from which, and depth (k) below which, a 2-D product whose A is not transposed takes the
# AVX2 GEMM on one thread
_MIN_ROWS_AVX2, _MAX_DEPTH_AVX2 = 1024, 1024
_simd = None         # the vector width of ember's float32 GEMM here (512, 256, 0), asked once


def _own_gemm(nt=None, mk=(0, 0)):
    """ember's float32 GEMM where a call on ``nt`` threads (default: the current number) takes
    it, or None: not built, turned off, a CPU with neither AVX-512 nor AVX2 and FMA, or AVX2
    on one thread (see above) unless for a 2-D product of shape ``mk`` (m, k) with m >=
    _MIN_ROWS_AVX2 and k < _MAX_DEPTH_AVX2."""
    global _simd
    fn = _C.kernel("gemm", _F32)
    if fn is None:
        return None
    if _simd is None:
        _simd = _C._lib.gemm_simd_f32()
    if _simd == 512 or (_simd == 256 and ((nt or _C.num_threads()) > 1 or
                                          (mk[0] >= _MIN_ROWS_AVX2 and mk[1] < _MAX_DEPTH_AVX2))):
        return fn
    return None


def own_takes(la, lb, work, nt, mk=(0, 0)):
    """Whether a 2-D float32 product of ``work`` multiply-adds, shape ``mk`` (m, k), layouts
    ``la``, ``lb`` (``_layout``), on ``nt`` threads takes ember's GEMM (see the module's
    docstring)."""
    return _own_gemm(nt, mk) is not None and _own_rule(la, lb, work, nt)


def _own_rule(la, lb, work, nt):
    """own_takes where ember's GEMM runs on ``nt`` threads (with AVX2 on one thread, a 2-D
    product of the shape _own_gemm admits)."""
    if not (la and lb):
        return False
    if nt > 1:
        return _MIN_OWN_THREADED < work
    return work >= _MIN_OWN and (_simd != 256 or la[0] == _NO_T)


def _layout(a):
    """(CBLAS transpose flag, leading dim) of the matrices in ``a``'s last two dims, or None
    where neither dim is unit-stride. A dim of size 1 has no meaningful stride."""
    (r, c), (s0, s1), z = a.shape[-2:], a.strides[-2:], a.itemsize
    if (s1 == z or c == 1) and (r == 1 or (s0 % z == 0 and s0 // z >= c)):
        return _NO_T, (s0 // z if r > 1 else max(1, c))
    if (s0 == z or r == 1) and (c == 1 or (s1 % z == 0 and s1 // z >= r)):
        return _T, (s1 // z if c > 1 else max(1, r))
    return None


def _batch_stride(a, batch):
    """The one element stride that walks ``a``'s batch dims (broadcast to ``batch``) in row-major
    order, or None where they do not flatten into one."""
    lead = len(batch) - (a.ndim - 2)
    strides = [0] * lead + [s if n > 1 else None for s, n in zip(a.strides[:-2], a.shape[:-2])]
    step, size = None, 1
    for n, s in zip(reversed(batch), reversed(strides)):
        if n == 1:
            continue
        s = 0 if s is None else s                  # a size-1 dim of a, broadcast to n
        if step is None:
            step = s
        elif s != step * size:
            return None
        size *= n
    step = step or 0
    return None if step % a.itemsize else step // a.itemsize


def _strides(a, lay):
    """(row stride, column stride) of ``a``'s matrices, in elements, from ``_layout``."""
    return (lay[1], 1) if lay[0] == _NO_T else (1, lay[1])


def _own_matmul(fn, a, b, la, lb, batch, sa, sb, bias=None):
    """``a @ b`` (+ ``bias``, a contiguous float32 vector of n) by ember's float32 GEMM,
    ``batch`` products (matrix i of a at i * sa)."""
    (m, k), n = a.shape[-2:], b.shape[-1]
    count = math.prod(batch)
    out = np.empty(tuple(batch) + (m, n), _F32)
    if fn(count, m, n, k, _C.ptr(a), *_strides(a, la), sa, _C.ptr(b), *_strides(b, lb),
          sb, 0, None if bias is None else _C.ptr(bias), _C.ptr(out), max(1, n), m * n,
          _C.num_threads()) != 0:
        return None          # (a buffer could not be allocated)
    return out


def matmul2d(a, b, bias=None):
    """``a @ b`` (+ ``bias``: None, or a float32 vector of b's columns, added as C is written)
    for 2-D float32 NumPy arrays by ember's GEMM, or None where it does not apply (or the inner
    dims differ: the caller raises torch's error)."""
    (m, k), (k2, n) = a.shape, b.shape
    nt = _C.num_threads()
    # (the least any rule takes, checked first: most products in a model are small)
    if k != k2 or m * n * k <= _MIN_OWN_THREADED or b.dtype is not _F32:
        return None
    fn = _own_gemm(nt, (m, k))
    la, lb = fn and _layout(a), fn and _layout(b)
    if not fn or not _own_rule(la, lb, m * n * k, nt):
        return None
    if bias is not None and (type(bias) is not np.ndarray or bias.dtype is not _F32 or
                             bias.shape != (n,) or not bias.flags.c_contiguous):
        return None
    return _own_matmul(fn, a, b, la, lb, (), 0, 0, bias)


def matmul(a, b):
    """``a @ b`` for NumPy arrays with a batch (``a.ndim > 2`` or ``b.ndim > 2``, both >= 2), or
    None where the caller's ``numpy.matmul`` does as well (one thread: it makes the same BLAS
    calls, with less overhead) or the kernel does not apply."""
    if a.dtype not in _DTYPES or min(a.ndim, b.ndim) < 2 or max(a.ndim, b.ndim) < 3 or \
            a.size == 0 or b.size == 0:
        return None
    (m, k), n = a.shape[-2:], b.shape[-1]
    if a.size * b.size < _MIN_OWN * k:
        # (a.size * b.size / k bounds the multiply-adds from above, broadcast or not: below
        # the least any path here takes, numpy.matmul it is, without the checks below)
        return None
    f32 = a.dtype is _F32 and b.dtype is _F32
    # (OpenBLAS's small-matrix path beats ember's GEMM on small products whose B is not
    # transposed: those keep BLAS; on one thread numpy.matmul makes the same BLAS calls as the
    # bmm kernel with less overhead, so nothing below applies and this returns at once)
    own = f32 and (m * n * k >= _MIN_OWN_EACH or b.strides[-2] == b.itemsize)
    nt = _C.num_threads()
    if b.ndim > 2 and nt == 1 and not own:
        return None
    la, lb = _layout(a), _layout(b)
    if la is None or lb is None:
        return None
    if b.ndim == 2 and la[0] == _NO_T and _batch_stride(a[..., None], a.shape[:-1]) == la[1]:
        # the batch folds into the rows (a contiguous (N, L, in) @ (in, out)): one large GEMM,
        # which BLAS threads itself, not N small ones
        a2 = a.reshape(-1, k)
        out = matmul2d(a2, b) if a.dtype is _F32 else None
        return (np.matmul(a2, b) if out is None else out).reshape(a.shape[:-1] + (n,))
    own = own and _own_gemm()
    if own:
        sa_, sb_ = a.shape[:-2], b.shape[:-2]
        try:
            batch = sa_ if sa_ == sb_ else np.broadcast_shapes(sa_, sb_)
        except ValueError:
            return None
        sa, sb = _batch_stride(a, batch), _batch_stride(b, batch)
        if sa is not None and sb is not None and math.prod(batch) * m * n * k >= _MIN_OWN:
            return _own_matmul(own, a, b, la, lb, batch, sa, sb)
    fn = _C.kernel("bmm", a.dtype) if nt > 1 else None
    gemm = fn and blas.pointer(a.dtype)
    try:
        sa_, sb_ = a.shape[:-2], b.shape[:-2]
        batch = sa_ if sa_ == sb_ else np.broadcast_shapes(sa_, sb_)
    except ValueError:    # numpy.matmul raises it in the words dispatch turns into torch's
        return None
    count = math.prod(batch)
    sa, sb = _batch_stride(a, batch), _batch_stride(b, batch)
    if not gemm or count < nt or count * m * n * k < _MIN_WORK or sa is None or sb is None:
        return None       # (a batch smaller than the threads: BLAS threads each product)
    out = np.empty(batch + (m, n), a.dtype)
    _pinned(fn, gemm[0], gemm[1], count, la[0], lb[0], m, n, k, _C.ptr(a), la[1], sa,
            _C.ptr(b), lb[1], sb, 0, _C.ptr(out), max(1, n), m * n)
    return out
