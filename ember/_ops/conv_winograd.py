"""Winograd F(2x2, 3x3) for 3x3 convolutions with unit stride and dilation (NumPy, C kernel).

A direct convolution spends 9 multiply-adds per output and input channel; Winograd's minimal
filtering spends 16 per 2x2 output tile, i.e. 4: each 4x4 input tile is transformed
(``B^T d B``), the filter too (``U = G w G^T``), and the 16 elementwise products summed over
the input channels are 16 GEMMs; the inverse ``A^T m A`` gives the 2x2 outputs. The weight
gradient lives in the same domain: with ``dM = A dY A^T``, ``dU = sum_tiles dM * V`` (16 GEMMs
again) and ``dW = G^T dU G``. The input gradient is a convolution with the flipped kernel, so
``_conv_transpose_forward`` reaches :func:`forward` too.

The transforms and the blocking (a few tile rows at a time, so a block's operands stay in L2)
are the C kernel ``winograd_fwd`` / ``winograd_wgrad`` (ember/_C/kernels/winograd.h), which calls the
BLAS NumPy uses for the GEMMs. F(2x2, 3x3)'s transforms hold only 0, +-1 and 1/2: float32
results stay within a few ulp of the direct sums (F(4x4, 3x3) would save another 1.8x of the
GEMM work but loses ~2 decimal digits). Layers with fewer than 12 input channels per group
go to conv_cols.py instead (Winograd's GEMMs have those channels as inner dimension). The
im2col / per-tap paths in conv.py remain the reference and the fallback (CuPy, other shapes,
no C library or BLAS).
"""
import numpy as np

from .._C import kernels as _C
from .._backends import blas

_G = np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]])

# tiles per block: the transformed input and products of a block of 32 -> 64 channels take
# 16 * 96 * 4 bytes per tile (~1.5 MB at 256 tiles), within L2 with the GEMM's panels
_BLOCK = 256


def _kernel(name, x, w_shape, stride, dilation, groups, min_channels=16):
    """The C function ``name`` where Winograd applies to this convolution (NumPy, float32/64,
    3x3, unit stride and dilation, >= 16 channels per group on one side at least: with fewer
    on both, the transforms cost more than the GEMMs save); else None."""
    if (type(x) is not np.ndarray or len(w_shape) != 4 or tuple(w_shape[2:]) != (3, 3)
            or any(s != 1 for s in stride) or any(d != 1 for d in dilation)
            or max(x.shape[1] // groups, w_shape[0] // groups) < min_channels):
        return None
    fn = _C.kernel(name, x.dtype)
    return fn if fn is not None and blas.pointer(x.dtype) is not None else None


def _padded(x, padding, osize):
    """``x`` zero-padded by ``padding`` before and to ``2 * tiles + 2`` cells in all, so every
    4x4 input tile of the ``osize`` output lies inside; and the tile counts."""
    tiles = tuple(-(-o // 2) for o in osize)
    n, c, h, w = x.shape
    (ph, pw), (th, tw) = padding, tiles
    out = np.zeros((n, c, 2 * th + 2, 2 * tw + 2), x.dtype)
    out[:, :, ph:ph + h, pw:pw + w] = x
    return out, tiles


def _call(fn, *args):
    """Run the kernel with the thread count last; BLAS runs on one thread meanwhile (the
    kernel's threads each call it: see winograd.h)."""
    if _C.with_one_blas_thread(fn, *args) != 0:
        raise MemoryError("convolution: cannot allocate the Winograd kernel's buffers")


def forward(x, w, stride, padding, dilation, groups):
    """``conv2d(x, w, ...)`` (no bias) by Winograd, or None where it does not apply (see
    ``_kernel``)."""
    fn = _kernel("winograd_fwd", x, w.shape, stride, dilation, groups)
    osize = tuple(s + 2 * p - 2 for s, p in zip(x.shape[2:], padding))
    if fn is None or min(osize) < 1:
        return None
    xp_, (th, tw) = _padded(x, padding, osize)
    (n, c), o = x.shape[:2], w.shape[0]
    u = np.ascontiguousarray(np.einsum("ij,ocjk,lk->iloc", _G, w, _G).astype(
        x.dtype).reshape(16, o, c // groups))
    y = np.empty((n, o) + osize, x.dtype)
    gemm, ilp64 = blas.pointer(x.dtype)
    _call(fn, xp_.ctypes.data, n, c, th, tw, u.ctypes.data, o, groups, y.ctypes.data,
          *osize, max(1, _BLOCK // tw), gemm, ilp64)
    return y


def weight_grad(x, g, k, stride, padding, dilation, groups):
    """``dL/dweight`` (o, c / groups, *k) of ``y = conv2d(x, weight, ...)`` given ``g = dL/dy``
    (NumPy arrays) by Winograd, or None where it does not apply."""
    o = g.shape[1]
    fn = _kernel("winograd_wgrad", x, (o, x.shape[1] // groups) + tuple(k), stride, dilation,
                 groups)
    if fn is None or type(g) is not np.ndarray or g.dtype != x.dtype or any(
            o != s + 2 * p - 2 for o, s, p in zip(g.shape[2:], x.shape[2:], padding)):
        return None
    xp_, (th, tw) = _padded(x, padding, g.shape[2:])
    g = np.ascontiguousarray(g)
    (n, c), cg = x.shape[:2], x.shape[1] // groups
    du = np.zeros((16, o, cg), x.dtype)
    gemm, ilp64 = blas.pointer(x.dtype)
    _call(fn, xp_.ctypes.data, n, c, th, tw, g.ctypes.data, o, groups, *g.shape[2:],
          du.ctypes.data, max(1, _BLOCK // tw), gemm, ilp64)
    return np.einsum("ij,iloc,lk->ocjk", _G, du.reshape(4, 4, o, cg), _G).astype(x.dtype)
