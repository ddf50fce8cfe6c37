"""Convolution (1-D and 2-D) as im2col + GEMM per sample in C: the default CPU path wherever
Winograd does not take the layer.

The im2col paths in conv.py copy the whole batch's columns (c k, n Ho Wo), which fit no cache,
and then transpose the GEMM's (o, n Ho Wo) result; Winograd (conv_winograd.py) spends its time
in 16 GEMMs whose inner dimension is the input channels, all overhead with 3 of them (an image
network's first layer). The C kernels ``conv_cols_*`` (ember/_C/kernels/im2col.h) build one sample's
columns a block of output rows at a time in a buffer that stays in L2, and the GEMM writes that
sample's rows in place; the input gradient is the transposed pass (GEMM, then col2im), the
weight gradient sums ``dy_block @ col_block^T``. Any stride, padding, dilation and groups
(depthwise included); NumPy float32/float64 with a BLAS found; else None and conv.py's paths
run. A 1-D convolution runs as a 2-D one of height 1.
"""
import numpy as np

from .._C import kernels as _C
from .._backends import blas
from .conv_winograd import _call

# Winograd keeps 3x3 unit-stride layers whose image has at least this many channels per group:
# below it, its GEMMs (inner dimension: those channels) are too thin and these kernels win.
_WINOGRAD_MIN_CHANNELS = 12


def _kernel(name, x, img_cg, cg, og, k, stride, dilation):
    """The C kernel ``name`` for a convolution of NumPy ``x`` whose image (input of the
    forward, output of the transposed convolution) has ``img_cg`` channels per group, with
    ``cg`` input and ``og`` output channels per group: None where Winograd takes the layer (its
    own rule, conv_winograd._kernel), or these kernels do not apply."""
    if type(x) is not np.ndarray or len(k) not in (1, 2):
        return None
    winograd = (tuple(k) == (3, 3) and all(s == 1 for s in stride) and
                all(d == 1 for d in dilation) and max(cg, og) >= 16)
    if winograd and img_cg >= _WINOGRAD_MIN_CHANNELS:
        return None
    fn = _C.kernel(name, x.dtype)
    return fn if fn is not None and blas.pointer(x.dtype) is not None else None


def _as2d(a, *per_dim):
    """A 1-D convolution's array (n, c, L) and per-dim options as 2-D ones of height 1 (the
    leading option given: (1,) for stride/dilation/kernel, (0,) for paddings)."""
    if a.ndim == 4:
        return (a,) + tuple(tuple(v) for _, v in per_dim)
    return (a[:, :, None],) + tuple(lead + tuple(v) for lead, v in per_dim)


def _run(fn, a, b, out, n, o, groups, img, k, stride, padding, dilation, osize):
    # the geometry vector of im2col.h: image (c, H, W), kernel, stride, padding, dilation,
    # window grid (Ho, Wo)
    geom = np.array(tuple(img) + tuple(k) + tuple(stride) + tuple(padding) + tuple(dilation) +
                    tuple(osize), np.int64)
    if not (a.size and b.size and out.size):      # (an empty sum: no threads to start)
        out[...] = 0
        return out
    gemm, ilp64 = blas.pointer(a.dtype)
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)    # (kept alive over the call)
    _call(fn, a.ctypes.data, b.ctypes.data, out.ctypes.data, n, o, groups, geom.ctypes.data,
          gemm, ilp64)
    return out


def forward(x, w, stride, padding, dilation, groups):
    """``conv2d(x, w, ...)`` or ``conv1d`` (no bias), or None where these kernels do not
    apply."""
    (n, c), (o, cg) = x.shape[:2], w.shape[:2]
    fn = _kernel("conv_cols_fwd", x, cg, cg, o // groups, w.shape[2:], stride, dilation)
    if fn is None:
        return None
    nd = x.ndim - 2
    (x, stride, dilation), (w, padding) = _as2d(x, ((1,), stride), ((1,), dilation)), \
        _as2d(w, ((0,), padding))
    k = w.shape[2:]
    osize = tuple((s + 2 * p - d * (kk - 1) - 1) // st + 1 for s, p, d, kk, st in zip(
        x.shape[2:], padding, dilation, k, stride))
    y = _run(fn, x, w, np.empty((n, o) + osize, x.dtype), n, o, groups, x.shape[1:], k,
             stride, padding, dilation, osize)
    return y if nd == 2 else y[:, :, 0]


def transpose(x, w, stride, padding, dilation, output_padding, groups):
    """``conv_transpose2d(x, w, ...)`` or ``conv_transpose1d`` (no bias; ``w`` is (in,
    out / groups, *k)), or None where these kernels do not apply."""
    (n, ci), og = x.shape[:2], w.shape[1]
    fn = _kernel("conv_cols_transpose", x, og, og, ci // groups, w.shape[2:], stride, dilation)
    if fn is None:
        return None
    nd = x.ndim - 2
    (x, stride, dilation), (w, padding, output_padding) = \
        _as2d(x, ((1,), stride), ((1,), dilation)), _as2d(w, ((0,), padding),
                                                          ((0,), output_padding))
    k = w.shape[2:]
    size = tuple((s - 1) * st - 2 * p + d * (kk - 1) + 1 + op for s, st, p, d, kk, op in zip(
        x.shape[2:], stride, padding, dilation, k, output_padding))
    y = _run(fn, x, w, np.zeros((n, og * groups) + size, x.dtype), n, ci, groups,
             (og * groups,) + size, k, stride, padding, dilation, x.shape[2:])
    return y if nd == 2 else y[:, :, 0]


def weight_grad(x, g, k, stride, padding, dilation, groups):
    """``dL/dweight`` (o, c / groups, *k) of ``y = conv(x, weight, ...)`` (1-D or 2-D) given
    ``g = dL/dy`` (NumPy arrays), or None where these kernels do not apply."""
    (n, c), o = x.shape[:2], g.shape[1]
    fn = _kernel("conv_cols_wgrad", x, c // groups, c // groups, o // groups, k, stride, dilation)
    if fn is None or type(g) is not np.ndarray or g.dtype != x.dtype:
        return None
    nd = x.ndim - 2
    (x, stride, dilation, k), (g, padding) = _as2d(x, ((1,), stride), ((1,), dilation),
                                                   ((1,), k)), _as2d(g, ((0,), padding))
    gw = _run(fn, x, g, np.zeros((o, c // groups) + tuple(k), x.dtype), n, o, groups,
              x.shape[1:], k, stride, padding, dilation, g.shape[2:])
    return gw if nd == 2 else gw[:, :, 0]
