"""Fused CUDA kernels of ember's own, beside the OpDefs whose CuPy code they replace on a GPU:
softmax / log_softmax (forward and backward), layer_norm / rms_norm (forward), gelu (forward
and backward), cross_entropy over class indices (forward and backward, with ignore_index and
label smoothing), embedding's backward (an atomicAdd scatter of rows, skipping padding_idx)
and the Adam/AdamW update (AdamW's decoupled decay ``p *= 1 - lr * wd`` is its ``decay``
factor). Scaled dot-product attention has its own kernels in ``_attention.py``. Each does in
one pass over memory what the ``xp`` code does in several; the ``xp`` code stays the reference
and the path for what a kernel does not take (other dtypes, a softmax dim that is not the
last, double backward).

Rows kernels run one block of 256 threads per row, reducing in registers, then warp shuffles,
then shared memory, accumulating in float for float32 and double for float64 inputs.
The kernels are compiled by CuPy (NVRTC) on first use, once per dtype.

``EMBER_CUDA_FUSED=0`` turns them off. The cuda test double has no ``RawKernel``, so there they
are off too; tests/test_cuda_kernels.py compiles their sources with NVRTC where it is
installed, runs the RawKernels on a CPU emulator of CUDA threads inside the double, and
checks them against the ``xp`` code and the cpu on a real GPU.
"""
import functools
import os

import numpy as np

_TYPES = {np.dtype(np.float32): ("float", "float"), np.dtype(np.float64): ("double", "double")}
_HALF = {**_TYPES, np.dtype(np.float16): ("float16", "float")}      # elementwise kernels
_THREADS = 256

_ROWS = r"""
typedef %(T)s T;
typedef %(A)s A;

__device__ __forceinline__ A neg_inf() { return -__int_as_float(0x7f800000); }

__device__ __forceinline__ A warp_reduce(A v, bool is_max) {
    for (int o = 16; o > 0; o >>= 1) {
        A other = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmax(v, other) : v + other;
    }
    return v;
}

// the block's sum (or max) of v, in every thread
__device__ A block_reduce(A v, bool is_max, A* shared) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_reduce(v, is_max);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = threadIdx.x < (blockDim.x >> 5) ? shared[threadIdx.x] : (is_max ? neg_inf() : (A)0);
    if (warp == 0) v = warp_reduce(v, is_max);
    if (threadIdx.x == 0) shared[0] = v;
    __syncthreads();
    v = shared[0];
    __syncthreads();
    return v;
}

extern "C" __global__ void softmax_fwd(const T* x, T* y, long long n, int log_) {
    __shared__ A shared[32];
    const T* xr = x + blockIdx.x * n;
    T* yr = y + blockIdx.x * n;
    A m = neg_inf(), s = 0;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) m = fmax(m, (A)xr[i]);
    m = block_reduce(m, true, shared);
    for (long long i = threadIdx.x; i < n; i += blockDim.x) s += exp((A)xr[i] - m);
    s = block_reduce(s, false, shared);
    A ls = log(s);
    for (long long i = threadIdx.x; i < n; i += blockDim.x)
        yr[i] = (T)(log_ ? (A)xr[i] - m - ls : exp((A)xr[i] - m) / s);
}

// softmax: gx = y (g - sum(g y));  log_softmax: gx = g - exp(y) sum(g)
extern "C" __global__ void softmax_bwd(const T* g, const T* y, T* gx, long long n, int log_) {
    __shared__ A shared[32];
    long long off = blockIdx.x * n;
    A s = 0;
    for (long long i = threadIdx.x; i < n; i += blockDim.x)
        s += log_ ? (A)g[off + i] : (A)g[off + i] * (A)y[off + i];
    s = block_reduce(s, false, shared);
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
        A gi = g[off + i], yi = y[off + i];
        gx[off + i] = (T)(log_ ? gi - exp(yi) * s : yi * (gi - s));
    }
}

// layer_norm (rms = 0) or rms_norm (1) of each row; w and b may be null
extern "C" __global__ void norm_fwd(const T* x, const T* w, const T* b, T* y, long long n,
                                    double eps, int rms) {
    __shared__ A shared[32];
    const T* xr = x + blockIdx.x * n;
    T* yr = y + blockIdx.x * n;
    A mean = 0, var = 0;
    if (!rms) {
        for (long long i = threadIdx.x; i < n; i += blockDim.x) mean += (A)xr[i];
        mean = block_reduce(mean, false, shared) / (A)n;
    }
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
        A d = (A)xr[i] - mean;
        var += d * d;
    }
    A rstd = (A)1 / sqrt(block_reduce(var, false, shared) / (A)n + (A)eps);
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
        A v = ((A)xr[i] - mean) * rstd;
        if (w) v *= (A)w[i];
        if (b) v += (A)b[i];
        yr[i] = (T)v;
    }
}

// the row's max and log-sum-exp, and (for label smoothing) its mean, in every thread
__device__ void row_stats(const T* xr, long long n, int mean, A* shared, A* m, A* lse, A* mu) {
    A mx = neg_inf(), s = 0, sx = 0;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) mx = fmax(mx, (A)xr[i]);
    mx = block_reduce(mx, true, shared);
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
        s += exp((A)xr[i] - mx);
        sx += (A)xr[i];
    }
    *m = mx;
    *lse = mx + log(block_reduce(s, false, shared));
    *mu = mean ? block_reduce(sx, false, shared) / (A)n : (A)0;
}

// cross entropy of each row against class t[row], smoothed by eps:
// (1 - eps) (lse - x_t) + eps (lse - mean(x)); an ignored row gives 0
extern "C" __global__ void ce_fwd(const T* x, const long long* t, T* loss, long long n,
                                  long long ignore, double eps) {
    __shared__ A shared[32];
    long long c = t[blockIdx.x];
    if (c == ignore) {
        if (threadIdx.x == 0) loss[blockIdx.x] = 0;
        return;
    }
    const T* xr = x + blockIdx.x * n;
    A m, lse, mu;
    row_stats(xr, n, eps != 0, shared, &m, &lse, &mu);
    if (threadIdx.x == 0)
        loss[blockIdx.x] = (T)(((A)1 - (A)eps) * (lse - (A)xr[c]) + (A)eps * (lse - mu));
}

// its gradient: coef[row * coef_step] (softmax - (1 - eps) onehot(t) - eps / n)
extern "C" __global__ void ce_bwd(const T* x, const long long* t, const T* coef,
                                  long long coef_step, T* gx, long long n, long long ignore,
                                  double eps) {
    __shared__ A shared[32];
    long long c = t[blockIdx.x];
    T* gr = gx + blockIdx.x * n;
    if (c == ignore) {
        for (long long i = threadIdx.x; i < n; i += blockDim.x) gr[i] = 0;
        return;
    }
    const T* xr = x + blockIdx.x * n;
    A m, lse, mu;
    row_stats(xr, n, 0, shared, &m, &lse, &mu);
    A k = (A)coef[blockIdx.x * coef_step], off = (A)eps / (A)n;
    for (long long i = threadIdx.x; i < n; i += blockDim.x)
        gr[i] = (T)(k * (exp((A)xr[i] - lse) - (i == c ? (A)1 - (A)eps : (A)0) - off));
}

// embedding's backward: gradient row r of g added into row idx[r] of gw (zeroed), one
// element per thread; padding_idx's rows get nothing
extern "C" __global__ void embedding_bwd(const long long* idx, const T* g, T* gw,
                                         long long size, long long d, long long pad) {
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < size;
         e += (long long)gridDim.x * blockDim.x) {
        long long r = e / d, row = idx[r];
        if (row != pad) atomicAdd(gw + row * d + (e - r * d), g[e]);
    }
}
"""

# gelu and its derivative, in float for float16 (CuPy's float16 converts to and from float)
_GELU_PRE = r"""
template <typename U> struct acc_of { typedef U type; };
template <> struct acc_of<float16> { typedef float type; };
"""
_GELU = r"""
typedef typename acc_of<T>::type A;
A v = (A)x;
if (approx) {
    A t = tanh((A)0.7978845608028654 * (v + (A)0.044715 * v * v * v));
    %s
} else {
    A cdf = (A)0.5 * ((A)1 + erf(v * (A)0.7071067811865476));
    %s
}
"""
_GELU_FWD = _GELU % ("y = (T)((A)0.5 * v * ((A)1 + t));", "y = (T)(v * cdf);")
_GELU_BWD = _GELU % (
    "gx = (T)((A)g * ((A)0.5 * ((A)1 + t) + (A)0.5 * v * ((A)1 - t * t) * (A)0.7978845608028654"
    " * ((A)1 + (A)3 * (A)0.044715 * v * v)));",
    "gx = (T)((A)g * (cdf + v * exp((A)-0.5 * v * v) * (A)0.3989422804014327));")

# Adam's update, the same operations in the same order as Adam._math's xp code
_ADAM = r"""
p = p * decay;
m = (m - g) * beta1 + g;
v = v * beta2 + g * g * one_minus_beta2;
%s
p = p - m / (sqrt(%s) + eps) * step_size;
"""


def enabled(xp):
    """Whether fused kernels run for arrays of ``xp`` (CuPy on a GPU, not turned off)."""
    return xp is not np and hasattr(xp, "RawKernel") and \
        os.environ.get("EMBER_CUDA_FUSED", "1") != "0"


@functools.lru_cache(maxsize=None)
def _rows_kernel(xp, name, dtype):
    t, a = _TYPES[dtype]
    return xp.RawKernel(_ROWS % {"T": t, "A": a}, name)


@functools.lru_cache(maxsize=None)
def _elementwise(xp, name):
    if name == "gelu_fwd":
        return xp.ElementwiseKernel("T x, int32 approx", "T y", _GELU_FWD, "ember_gelu_fwd",
                                    preamble=_GELU_PRE)
    if name == "gelu_bwd":
        return xp.ElementwiseKernel("T x, T g, int32 approx", "T gx", _GELU_BWD,
                                    "ember_gelu_bwd", preamble=_GELU_PRE)
    ams = name == "adam_amsgrad"
    args = "T g, T beta1, T beta2, T one_minus_beta2, T eps, T step_size, T decay"
    return xp.ElementwiseKernel(args, "T p, T m, T v" + (", T vmax" if ams else ""),
                                _ADAM % (("vmax = vmax > v ? vmax : v;", "vmax") if ams else
                                         ("", "v")), "ember_" + name)


def fusable(*items, types=_TYPES):
    """``(xp, arrays)``: the CuPy arrays of ``items`` (tensors or arrays; None stays None)
    when fused kernels apply to them (one dtype of ``types``, on a GPU; for tensors, grad mode
    off, as in a backward that nothing differentiates), else None."""
    from .._tensor import Tensor
    from ..autograd.grad_mode import state
    arrays = [i._data if isinstance(i, Tensor) else i for i in items]
    if any(isinstance(i, Tensor) for i in items) and state.grad_enabled:
        return None
    first = arrays[0]
    if type(first) is np.ndarray or first.dtype not in types or not first.size:
        return None
    from .._backends import array_module
    xp = array_module(first)
    if not enabled(xp) or any(a is not None and (type(a) is not type(first) or
                                                 a.dtype != first.dtype) for a in arrays):
        return None
    return xp, arrays


def _wrap(out, like):
    """``out`` as ``like`` is: a Tensor on its device, or an array."""
    from .._tensor import Tensor
    return Tensor._wrap(out, like.device) if isinstance(like, Tensor) else out


def softmax(a, b, dim, log):
    """softmax (log 0) or log_softmax (1) of ``a`` along ``dim``, or with ``b`` (the result)
    the backward of gradient ``a``, in one kernel; None when it does not apply (dim not the
    last of a contiguous array, another dtype, the cpu)."""
    found = fusable(a, b)
    if found is None:
        return None
    xp, (x, y) = found
    if dim % x.ndim != x.ndim - 1:
        return None
    x = xp.ascontiguousarray(x)
    n = x.shape[-1]
    out = xp.empty(x.shape, x.dtype)
    if b is None:
        _rows_kernel(xp, "softmax_fwd", x.dtype)((x.size // n,), (_THREADS,),
                                                 (x, out, np.int64(n), np.int32(log)))
    else:
        _rows_kernel(xp, "softmax_bwd", x.dtype)((x.size // n,), (_THREADS,), (
            x, xp.ascontiguousarray(y), out, np.int64(n), np.int32(log)))
    return _wrap(out, a)


def norm(x, weight, bias, n, eps, rms):
    """layer_norm (rms 0) or rms_norm (1) over the last ``n`` elements of each row of ``x``
    in one kernel, or None."""
    found = fusable(x, weight, bias)
    if found is None:
        return None
    xp, arrays = found
    x, w, b = (None if a is None else xp.ascontiguousarray(a) for a in arrays)
    out = xp.empty(x.shape, x.dtype)
    _rows_kernel(xp, "norm_fwd", x.dtype)((x.size // n,), (_THREADS,), (
        x, np.uintp(0) if w is None else w, np.uintp(0) if b is None else b, out, np.int64(n),
        np.float64(eps), np.int32(rms)))
    return out


def gelu(x, g, approximate):
    """gelu(x), or with ``g`` its backward, in one elementwise kernel (float16 too), or
    None."""
    found = fusable(x, g, types=_HALF)
    if found is None:
        return None
    xp, (xa, ga) = found
    flag = np.int32(approximate == "tanh")
    out = _elementwise(xp, "gelu_fwd")(xa, flag) if g is None else \
        _elementwise(xp, "gelu_bwd")(xa, ga, flag)
    return _wrap(out, x)


def cross_entropy(x, t, ignore_index, reduction, label_smoothing):
    """Cross entropy of (N, C) logits against (N,) int64 classes in one kernel (the per-row
    losses; the reduction in ``xp``), or None: another layout or dtype, or a target out of
    range (the ``xp`` path then raises torch's error)."""
    found = fusable(x)
    if found is None or type(t) is not type(x) or x.ndim != 2 or t.shape != x.shape[:1] or \
            t.dtype != np.int64:
        return None
    xp = found[0]
    from .._ops.indexing import out_of_range
    valid = t != ignore_index
    if out_of_range(xp.where(valid, t, 0), x.shape[1]):
        return None
    losses = xp.empty(x.shape[:1], x.dtype)
    _rows_kernel(xp, "ce_fwd", x.dtype)(x.shape[:1], (_THREADS,), (
        xp.ascontiguousarray(x), xp.ascontiguousarray(t), losses, np.int64(x.shape[1]),
        np.int64(ignore_index), np.float64(label_smoothing)))
    if reduction == "none":
        return losses
    return losses.sum() if reduction == "sum" else losses.sum() / valid.sum().astype(x.dtype)


def cross_entropy_backward(g, x, t, ignore_index, reduction, label_smoothing):
    """The gradient of ``cross_entropy`` for its logits, in one kernel (tensors in, grad mode
    off), or None."""
    found = fusable(g, x)
    if found is None or type(t._data) is not type(found[1][1]):
        return None
    xp, (ga, xa) = found
    ta = t._data
    if xa.ndim != 2 or ta.shape != xa.shape[:1] or ta.dtype != np.int64:
        return None
    valid = ta != ignore_index
    coef = ga / xp.maximum(valid.sum(), 1).astype(xa.dtype) if reduction == "mean" else ga
    coef = xp.ascontiguousarray(coef.reshape(-1))
    gx = xp.empty(xa.shape, xa.dtype)
    _rows_kernel(xp, "ce_bwd", xa.dtype)(xa.shape[:1], (_THREADS,), (
        xp.ascontiguousarray(xa), xp.ascontiguousarray(ta), coef, np.int64(coef.size > 1),
        gx, np.int64(xa.shape[1]), np.int64(ignore_index), np.float64(label_smoothing)))
    return _wrap(gx, g)


def embedding_backward(g, indices, rows, padding_idx):
    """The gradient of an embedding table of ``rows`` rows: each row of ``g`` added into the
    row its index names by atomicAdd, padding_idx's left at zero; None where it does not apply
    (grad mode on, another dtype)."""
    found = fusable(g)
    idx = indices._data
    if found is None or type(idx) is not type(found[1][0]):
        return None
    xp, (ga,) = found
    d = ga.size // max(idx.size, 1)
    gw = xp.zeros((rows, d), ga.dtype)
    size = ga.size
    _rows_kernel(xp, "embedding_bwd", ga.dtype)((min(-(-size // _THREADS), 65535),),
                                                (_THREADS,), (
        xp.ascontiguousarray(idx.astype(np.int64, copy=False)), xp.ascontiguousarray(ga), gw,
        np.int64(size), np.int64(d), np.int64(padding_idx)))
    return _wrap(gw, g)


def adam(p, g, m, v, vmax, beta1, beta2, eps, step_size, decay):
    """One Adam(W) update of cuda arrays in place, in one kernel; False when it does not
    apply (nothing changed)."""
    found = fusable(p, g, m, v, vmax)
    if found is None:
        return False
    xp = found[0]
    kernel = _elementwise(xp, "adam" if vmax is None else "adam_amsgrad")
    args = (g, beta1, beta2, 1 - beta2, eps, step_size, decay, p, m, v)
    kernel(*(args if vmax is None else args + (vmax,)))
    return True
