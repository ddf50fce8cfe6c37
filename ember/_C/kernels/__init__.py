"""ember's optional compiled CPU kernels (kernels.c), loaded with ctypes on first use.

An op's forward (or backward) asks :func:`kernel` for a kernel beside its NumPy code and falls
back to that code when it gets None: the library was not built, ``EMBER_NO_C=1`` is set, or a
:func:`disabled` block is active. The NumPy code is the reference the kernels are tested
against (tests/test_kernels.py); docs/kernels.md says how the library is built and why.
"""
import contextlib
import functools
import math
import os

import numpy as np

from .. import dispatch as _dispatch

_lib = None              # the CDLL once loaded; False when it cannot be
_off = os.environ.get("EMBER_NO_C", "") not in ("", "0")


# x86-64-v3 as /proc/cpuinfo spells it (abm: lzcnt); the OS saving ymm registers is implied
_V3_FLAGS = frozenset({"avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "movbe", "abm"})


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def library_path():
    """The kernel library this process loads: the copy built for x86-64-v3 (AVX2 with FMA,
    setup.py) on such a CPU without AVX-512, else the baseline (whose hot loops carry
    AVX-512 and AVX2 clones). ``EMBER_KERNELS=baseline`` forces the baseline."""
    folder = os.path.dirname(os.path.abspath(__file__))
    v3 = os.path.join(folder, "libember_kernels_v3.so.1")
    if os.environ.get("EMBER_KERNELS") != "baseline" and os.path.exists(v3):
        flags = _cpu_flags()
        if _V3_FLAGS <= flags and "avx512f" not in flags:
            return v3
    return os.path.join(folder, "libember_kernels.so.1")


def _load():
    import ctypes          # here, not at import: ``import ember`` stays cheap
    path = library_path()       # (ember/__init__ set GOMP_SPINCOUNT: libgomp reads it)
    try:
        lib = ctypes.CDLL(path)
    except OSError:        # not built (or built for another machine): the NumPy path runs
        return False
    _declare(lib)
    # NOTE: OpenMP's thread pool does not survive fork: a child that ran a kernel on more than
    # one thread would hang. Children (DataLoader workers...) use one thread, as in torch.
    if hasattr(os, "register_at_fork"):
        from ... import _config
        os.register_at_fork(after_in_child=lambda: _config._state.update(threads=1))
    return lib


def _declare(lib):
    import ctypes
    p, i64, i, d = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_double
    sigs = {"softmax": [p, p, p, i64, i64, i64, i, i, i],
            "gelu": [p, p, p, i64, i, i],
            "layer_norm": [p, p, p, p, p, p, i64, i64, d, i, i64, i],
            "layer_norm_bwd": [p, p, p, p, p, p, i64, i64, d, i, i64, i],
            "cross_entropy": [p, p, p, p, i64, i64, i64, i], "nll": [p, p, p, p] + [i64] * 4,
            "adam": [p, p, p, p, p, i64, d, d, d, d, d, d, i],
            "pointwise": [i, p, p, p, p, i64, d, d, d, i],  # (pointwise.h: float32 only)
            "special": [i, p, i64, p, i64, p, i64, i],
            "winograd_fwd": [p, i64, i64, i64, i64, p, i64, i64, p, i64, i64, i64, p, i, i],
            "winograd_wgrad": [p, i64, i64, i64, i64, p, i64, i64, i64, i64, p, i64, p, i, i],
            "conv_cols_fwd": [p, p, p, i64, i64, i64, p, p, i, i],
            "conv_cols_wgrad": [p, p, p, i64, i64, i64, p, p, i, i],
            "conv_cols_transpose": [p, p, p, i64, i64, i64, p, p, i, i],
            "attn_fwd_tile": [p, i64, i64, p, p, i64, p, i64, i64, i64, i64, i64, i64, i64, i],
            "attn_bwd_tile": [p, p, i64, i64, p, p, i64, i64, i64, i64, i64, i],
            "attn_small_fwd": [p, p, p, p, i64, i64, i64, i64, i64, i64, d, i64, p, i, i],
            "attn_small_bwd": [p, p, p, p, i64, i64, i64, i64, i64, i64, d, i64, p, i, i],
            "scan": [p, p, i64, i64, i64, i, i, i], "cumext": [p, p, p, i64, i64, i64, i, i],
            "rank_rows": [p, i64, i64, i, i64, p, p, i],
            "topk_rows": [p, i64, i64, i64, i, p, p, i], "mode_rows": [p, i64, i64, p, p, i],
            "sort_rows": [p, i64, i64, i, p, p, i],
            "unique_runs": [p, i64, i, p, p, p],       # (count.h)
            "hist_rows": [p, p, i64, i64, i64, i, d, d, p, i64, p, p, i],
            "bincount_w": [p, p, i64, p],
            "search_rows": [p, i64, i64, p, i64, i64, i, p, i],
            "gather": [p, p, p, i64, i64, i64, i64, i], "take_rows": [p, p, p, i64, i64, i64, i64, i, i],
            "pool": [p, p, p, i64, p, p, i, i], "batch_norm": [p] * 6 + [i64] * 3 + [d, i, i],
            "factor": [i, p, p, p, p, p, i64, i64, i64, i64],                 # (factor.h)
            "small_mm": [i64] * 13 + [p] * 4 + [d, d],
            "dot": [p, p, i64, p, i],
            "mask_select": [p, p, p, i64, p, i], "mask_scatter": [p, p, p, p, i64, p, i],
            "flip_rows": [p, p, i64, i64, i], "nextafter": [p, p, p, i64, i],   # (select.h)
            "scatter": [p, p, p, p, i64, i64, i64, i64, i, i, i],
            "add_rows": [p, p, p, p, p, i64, i64, i64, i64],
            "add_bias": [p, p, i64, i64, i], "sum_rows": [p, p, i64, i64, i],    # (rowops.h)
            "outer": [p, p, p, i64, i64, i64, i], "prod_rows": [p, p, i64, i64, i],
            "diag_sum": [p, i64, i64, p],
            "addr": [p, i64, p, p, p, i64, i64, d, d, i], "diff_rows": [p, p, i64, i64, i],
            "cross3": [p, p, p, i64, i64, i], "logcumsumexp": [p, p, i64, i64, i64, i],
            "interleave": [p, p, p, i64, i], "polar": [p, p, p, i64, i],
            "lstm_cell": [p] * 7 + [i64, i64, i],
            "reduce_rows": [i, p, p, d, p, i64, i64, i], "stats_rows": [p, p, p, i64, i64, d, i, i],
            "libm": [i, p, p, i64],                   # (kernels.c: glibc's, float64 only)
            # (BLAS's cblas_?gemm address and whether it takes 64-bit ints, then threads)
            "lstm_fwd": [p] * 8 + [i64, i64, i64, i, p, i, i],
            "lstm_bwd": [p, i64] + [p] * 7 + [i64, i64, i64, i, p, i, i],
            "fft_c2c": [p, p, i64, i64, i64, i64, p, i, d, i],
            "bmm": [p, i, i64, i, i, i64, i64, i64, p, i64, i64, p, i64, i64, i, p, i64, i64, i],
            # (sgemm.h, float32 only: batch, m, n, k, then a, b as pointer, strides, then
            # acc, bias (NULL or n floats), c as pointer, strides)
            "gemm": [i64] * 4 + [p, i64, i64, i64] * 2 + [i, p, p, i64, i64, i],
            "kron_rows": [p, p, p, i64, i64, i64, i64, i],                      # (rowops.h)
            # (one function each, no dtype suffix: parloop.h's, select.h's tri_rows)
            "parloop": [p, p, i64, i64, i, i] + [p, i64, i64] * 4, "xor_wide": [p, i64, i, p, i],
            "parloop_reduce": [p, p, i64, i, p, i64, p, i64], "tri_rows": [p, p] + [i64] * 4 + [i, i64, i],
            "isin": [p, i64, p, i64, i, p, i], "cdist2": [p, p, p] + [i64] * 4 + [i]}
    for name in ("f16_widen", "f16_narrow", "bf16_widen", "bf16_narrow"):   # (half.h)
        getattr(lib, name).argtypes, getattr(lib, name).restype = [p, p, i64], ctypes.c_int
    for name in (f"nonzero_u{w}{c}" for w in (8, 16, 32, 64) for c in ("_count", "")):
        fn, count = getattr(lib, name), name.endswith("count")      # (select.h's nonzero)
        fn.argtypes = [p, i64, i64, p, i] + [p, p, i] * (not count)
        fn.restype = i64 if count else None
    for name, args in sigs.items():
        for suffix in ("_f32", "_f64", ""):
            fn = getattr(lib, name + suffix, None)
            if fn is not None:
                # (Winograd, im2col and attn_small kernels return -1 when they cannot allocate
                # their buffers, lstm_* when they cannot allocate their weight panels;
                # gather/scatter/add_rows return 1 for an index out of range, cross_entropy and nll
                # -1 for a target out of range: the caller raises)
                fn.argtypes = args
                fn.restype = ctypes.c_int if name.startswith(
                    ("winograd", "conv_cols", "lstm", "attn_small")) or \
                    name in ("gather", "take_rows", "scatter", "add_rows", "gemm", "pointwise",
                             "rank_rows", "topk_rows", "fft_c2c", "nll", "mode_rows",
                             "hist_rows", "sort_rows") else ctypes.c_int64 if name in (
                                 "cross_entropy", "unique_runs", "bincount_w") else None


_SUFFIX, _fast = {"f": "_f32", "d": "_f64"}, {}    # (by dtype.char: hashing a dtype is slow)


def fast(fn):
    """The ctypes function ``fn`` (argtypes and restype declared) called through the dispatch
    extension's ``kcall``, skipping ctypes' argument conversion (~15k instructions a call);
    ``fn`` itself where kcall cannot (no extension, another platform, a float argument)."""
    import ctypes
    kcall, kinds = getattr(_dispatch.ext, "kcall", None), {
        ctypes.c_void_p: "p", ctypes.c_int64: "l", ctypes.c_int: "i", ctypes.c_double: "d"}
    sig = [kinds.get(t, "v" if t is None else None) for t in [fn.restype, *(fn.argtypes or ())]]
    if kcall is None or None in sig or sig[0] not in "vil" or sig.count("d") > 8 or \
            len(sig) - 1 - sig.count("d") > 20:
        return fn
    return functools.partial(kcall, ctypes.cast(fn, ctypes.c_void_p).value, "".join(sig).encode())


def kernel(name, dtype):
    """The C function ``name`` for arrays of ``dtype`` (through :func:`fast`), or None (not
    built, turned off, or a dtype without a kernel: the caller then runs its NumPy code)."""
    c = dtype.char if type(dtype) is not type else np.dtype(dtype).char    # (np.float32 too)
    if _off or (fn := _fast.get((name, c), False)) is None:
        return None
    if fn is False:
        lib = _library()
        fn = lib and c in _SUFFIX and getattr(lib, name + _SUFFIX[c], None)
        fn = _fast[name, c] = fast(fn) if fn else None
    return fn


def _library():
    """The loaded CDLL, or None where it cannot be loaded (whatever ``EMBER_NO_C`` says)."""
    global _lib
    if _lib is None:
        _lib = _load()
    return _lib or None


_F16, _F32, _I64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.int64)
_CAST = {(_F16, _F32): "f16_widen", (_F32, _F16): "f16_narrow"}


def astype(a, dtype):
    """``a.astype(dtype)``; float16 or bfloat16 <-> float32 of a large contiguous array by
    half.h (F16C; integer rounding for bfloat16), which NumPy's and ml_dtypes' element by
    element conversions are many times slower than."""
    name = _CAST.get((a.dtype, dtype))
    if name is None and "bfloat16" in (a.dtype.name, dtype.name) and _F32 in (a.dtype, dtype):
        name = "bf16_narrow" if a.dtype == _F32 else "bf16_widen"
    if name is None or type(a) is not np.ndarray or a.size < 2048 or _off or \
            not a.flags.c_contiguous:
        return a.astype(dtype)
    lib, out = _library(), np.empty(a.shape, dtype)
    if lib and getattr(lib, name)(a.ctypes.data, out.ctypes.data, a.size) == 0:
        return out
    return a.astype(dtype)


# pointwise.h's op codes
_POINTWISE = {name: code for code, name in enumerate(
    "sigmoid silu leaky_relu hardsigmoid hardswish clamp nan_to_num sign elu softplus "
    "sigmoid_bwd silu_bwd logaddexp erfinv leaky_relu_bwd hardsigmoid_bwd hardswish_bwd elu_bwd "
    "softplus_bwd remainder remainder_scalar angle lgamma ndtri digamma exp exp2 expm1 log log2 "
    "log10 log1p sinh cosh tan atan asin acos atanh atan2 logaddexp2 hypot rsqrt reciprocal "
    "hardshrink softshrink shrink_bwd threshold threshold_bwd fmod fmod_scalar floor_divide "
    "floor_divide_scalar scale_bwd expm1_bwd log_bwd log1p_bwd sinh_bwd cosh_bwd tan_bwd atan_bwd "
    "asin_bwd atanh_bwd reciprocal_bwd rsqrt_bwd mish mish_bwd logsigmoid logsigmoid_bwd "
    "hardtanh_bwd frac logit logit_bwd bce_logits bce_logits_bwd lerp addcmul addcdiv "
    "copysign entr xlogy xlog1py sinc tanh asinh loss_bwd bce bce_bwd "
    "bce_target_bwd pow clamp_bwd erf erfc pow_bwd".split())}


def pointwise(name, x, p0=0.0, p1=0.0, p2=0.0, *, other=None, min_size=1, out=None, third=None):
    """Op ``name`` of pointwise.h (one fused float32 pass) over a C-contiguous NumPy float32
    array ``x`` (and ``other``, of its shape and dtype, for the two-input ops: logaddexp and the
    ``*_bwd`` ones, whose ``other`` is the gradient; ``third`` too for addcmul and addcdiv),
    with up to three float parameters ``p0``, ``p1``, ``p2``; None
    where it does not apply (the caller then runs its NumPy code). Below ``min_size`` elements
    NumPy's one or two passes beat the call (the caller says so); several never do (1).
    ``out`` (a C-contiguous array of ``x``'s shape and dtype, ``x`` itself included) takes the
    result in place of a new array."""
    # (kernel()'s cache read inline, and a loop, not a generator: small calls pay for each)
    fn = None if _off or type(x) is not np.ndarray or x.size < min_size or not \
        x.flags.c_contiguous else _fast.get(("pointwise", x.dtype.char)) or kernel(
            "pointwise", x.dtype)
    if fn is None:
        return None
    shape, dt = x.shape, x.dtype
    if other is not None or third is not None or out is not None:      # (none: a unary op's call)
        for a in (other, third, out):
            if a is not None and (type(a) is not np.ndarray or a.dtype != dt or a.shape != shape):
                return None
        if out is not None and not out.flags.c_contiguous:
            return None
        # (a strided or broadcast other, as sum's gradient, is copied: still one pass less)
        other, third = other if other is None else contiguous(other), \
            third if third is None else contiguous(third)
    out = np.empty(shape, dt) if out is None else out
    fn(_POINTWISE[name], ptr(x), ptr(other), ptr(third), ptr(out), x.size, p0, p1, p2,
       _config and _config._state["threads"] or num_threads())    # (no star-args: a quick call)
    return out


# special.h's op codes (modified_bessel_i0/i1 are i0/i1)
_SPECIAL = {name: code for code, name in enumerate(
    "chebyshev_polynomial_t chebyshev_polynomial_u chebyshev_polynomial_v chebyshev_polynomial_w "
    "shifted_chebyshev_polynomial_t shifted_chebyshev_polynomial_u "
    "shifted_chebyshev_polynomial_v shifted_chebyshev_polynomial_w hermite_polynomial_h "
    "hermite_polynomial_he laguerre_polynomial_l legendre_polynomial_p i0 i0e i1 i1e "
    "modified_bessel_k0 modified_bessel_k1 scaled_modified_bessel_k0 scaled_modified_bessel_k1 "
    "bessel_j0 bessel_j1 bessel_y0 bessel_y1 airy_ai spherical_bessel_j0 erfcx ndtr log_ndtr ndtri "
    "lgamma digamma igamma igammac zeta trigamma _standard_gamma_grad polygamma mvlgamma".split())}
_SPECIAL_BINARY = {"igamma", "igammac", "zeta", "_standard_gamma_grad", "polygamma", "mvlgamma"}
_SPECIAL.update(modified_bessel_i0=_SPECIAL["i0"], modified_bessel_i1=_SPECIAL["i1"])


def special(name, x, n=None):
    """torch.special's function ``name`` (special.h: in double, one pass over threads) of a
    float32 or float64 NumPy array ``x``, with the polynomials' degree or igamma's ``x`` as
    ``n`` (an array of ``x``'s dtype, broadcast with it, or a number); None where it does not
    apply (the caller runs its NumPy code). Any size: the reference's dozens of NumPy passes
    never win."""
    code = _SPECIAL.get(name)
    fn = None if _off or code is None or type(x) is not np.ndarray or (n is None) == (
        code < 12 or name in _SPECIAL_BINARY) else _fast.get(("special", x.dtype.char)) or \
        kernel("special", x.dtype)          # (kernel()'s cache read inline, as pointwise's)
    nt = _config and _config._state["threads"] or num_threads()     # (read inline: quicker)
    if n is None and fn is not None:    # (one operand: the common call, none of the below)
        x, out = contiguous(x), np.empty(x.shape, x.dtype)
        fn(code, ptr(x), 1, None, 0, ptr(out), x.size, nt)
        return out
    if fn is None or not (type(n) is np.ndarray and n.dtype is x.dtype):
        if fn is None or type(n) not in (int, float) or \
                float(np.asarray(n, x.dtype)) != n:        # (a degree the dtype cannot hold)
            return None
        n = np.asarray(n, x.dtype)
    if n.shape == x.shape or n.ndim == 0:    # (the common cases, no NumPy helper)
        shape, keep = x.shape, (contiguous(x), contiguous(n))
    else:   # (a single element is read with stride 0; the copies stay referenced in ``keep``)
        shape = np.broadcast_shapes(x.shape, n.shape)
        keep = [contiguous(a if a.size == 1 or a.shape == shape else np.broadcast_to(a, shape))
                for a in (x, n)]
    out = np.empty(shape, x.dtype)      # (a bool is an int to the kernel's call)
    fn(code, ptr(keep[0]), x.size != 1, ptr(keep[1]), n.size != 1, ptr(out), out.size, nt)
    return out


# elements below which NumPy's single pass beats a kernel call (ctypes' call overhead)
_MIN_ROWS_KERNEL = 1 << 15


def add_bias(out, bias):
    """``out += bias`` broadcast over the rows of a C-contiguous NumPy ``out`` (a linear
    layer's bias) by the rowops kernel, split over threads; False (nothing done) where it does
    not apply: the caller adds with NumPy."""
    fn = kernel("add_bias", out.dtype) if type(out) is np.ndarray and \
        out.size >= _MIN_ROWS_KERNEL else None
    if fn is None or type(bias) is not np.ndarray or bias.dtype != out.dtype or \
            bias.shape != out.shape[-1:] or not (out.flags.c_contiguous and
                                                  bias.flags.c_contiguous):
        return False
    fn(ptr(out), ptr(bias), out.size // bias.size, bias.size, num_threads())
    return True


def sum_rows(a):
    """``numpy.add.reduce(a, 0)`` of a C-contiguous 2-D NumPy array (a bias's gradient), bit
    for bit, by the rowops kernel over threads; None where it does not apply. (One column is
    a contiguous run that NumPy sums pairwise: it keeps NumPy.)"""
    fn = kernel("sum_rows", a.dtype) if type(a) is np.ndarray and a.ndim == 2 and \
        a.size >= _MIN_ROWS_KERNEL and a.shape[0] > 0 and a.shape[1] > 1 and \
        a.flags.c_contiguous else None
    if fn is None:
        return None
    out = np.empty(a.shape[1], a.dtype)
    fn(ptr(a), ptr(out), a.shape[0], a.shape[1], num_threads())
    return out


def outer(g, x):
    """``g[:, :, None] * x[:, None, :]`` of C-contiguous (B, O) and (B, I) NumPy arrays of one
    float dtype (per-sample weight gradients) by rowops' outer, whose streaming stores write
    the large result without first reading it into the cache; None where it does not apply."""
    fn = kernel("outer", g.dtype) if type(g) is np.ndarray and type(x) is np.ndarray and \
        g.ndim == x.ndim == 2 and g.shape[0] == x.shape[0] and g.dtype == x.dtype and \
        g.size * x.shape[1] >= _MIN_ROWS_KERNEL and g.flags.c_contiguous and \
        x.flags.c_contiguous else None
    if fn is None:
        return None
    out = np.empty(g.shape + x.shape[1:], g.dtype)
    fn(ptr(g), ptr(x), ptr(out), g.shape[0], g.shape[1], x.shape[1], num_threads())
    return out


_WORDS = {4: np.dtype(np.float32), 8: np.dtype(np.float64)}
# elements below which NumPy's boolean indexing is as quick as two ctypes calls
_MIN_SELECT = 1 << 14


def prod(a, dim, keepdim):
    """``numpy.multiply.reduce`` of a C-contiguous float array over its last axis (``dim`` -1
    or ndim - 1) or over all of it (``dim`` None), by rowops' prod_rows: a partial product per
    SIMD lane (NumPy multiplies one element at a time), so it rounds as torch's loop, not
    NumPy's. None where it does not apply."""
    fn = kernel("prod_rows", a.dtype) if type(a) is np.ndarray and a.ndim and \
        a.size >= _MIN_ROWS_KERNEL and a.flags.c_contiguous else None
    if fn is None or dim is not None and dim not in (-1, a.ndim - 1):
        return None
    if dim is None:     # rows of 16384 (their products then multiplied), and what is left over
        flat = a.reshape(-1)
        m = a.size - a.size % 16384
        r = np.multiply.reduce(prod(flat[:m].reshape(-1, 16384), -1, False)) * \
            np.multiply.reduce(flat[m:])
        return np.full((1,) * a.ndim, r, a.dtype) if keepdim else np.asarray(r, a.dtype)
    out = np.empty(a.shape[:-1] + (1,) * keepdim, a.dtype)
    fn(ptr(a), ptr(out), a.size // a.shape[-1], a.shape[-1], num_threads())
    return out


_REDUCE = {name: code for code, name in enumerate(
    "sum sumsq nansum max min logsumexp mse smooth_l1 huber nancount".split())}
_REDUCE["mean"] = 0     # (the sum's code; ``c`` the count it is divided by)


def reduce(name, a, axes, keepdim=False, other=None, c=0.0, min_size=_MIN_ROWS_KERNEL):
    """Reduction ``name`` (sum, mean: the sum divided by ``c`` in double, sumsq: the sum of
    squares, nansum, nancount: the elements not nan, max, min, logsumexp; the
    sums of the losses of ``d = a - other``: mse, smooth_l1 with beta ``c``, huber with delta
    ``c``) of a C-contiguous float NumPy array over ``axes`` (sorted, non-negative), by rowops'
    reduce_rows where they are the trailing axes, rows of any length (sums pairwise, as
    NumPy's, in 32 vector lanes; NumPy adds 8 scalars), or, for sum and mean, the leading ones
    (sum_rows: NumPy's order); None where it does not apply (the caller runs NumPy), or below
    ``min_size`` elements, where NumPy's own reduction is as quick (a caller whose NumPy path
    is several passes takes any size)."""
    fn = kernel("reduce_rows", a.dtype) if type(a) is np.ndarray and \
        a.size >= min_size and a.flags.c_contiguous and axes else None
    if fn is None or other is not None and not (
            type(other) is np.ndarray and other.dtype == a.dtype and other.shape == a.shape and
            other.flags.c_contiguous):
        return None
    nd, k = a.ndim, len(axes)       # (axes sorted and distinct: their ends say where they are)
    if axes[-1] == k - 1 and k < nd and name in ("sum", "mean") and other is None:
        out = sum_rows(a.reshape(-1, math.prod(a.shape[k:])))
        if out is not None and name == "mean":     # (as reduce_rows' mean: in double)
            out = np.true_divide(out, np.float64(c), out=out, casting="unsafe")
        return None if out is None else out.reshape((1,) * k * keepdim + a.shape[k:])
    if axes[0] != nd - k or axes[-1] != nd - 1:
        return None
    shape, cols = a.shape[:nd - k] + (1,) * k * keepdim, math.prod(a.shape[nd - k:])
    out = np.empty(shape, a.dtype)
    fn(_REDUCE[name], ptr(a), ptr(other), c, ptr(out), a.size // cols, cols, num_threads())
    return out


def stats(name, a, axes, keepdim, c=0.0):
    """Two statistics of a C-contiguous float NumPy array over its trailing ``axes`` (sorted,
    non-negative), by rowops' stats_rows: ``(var, mean)`` (``std``: the standard deviation
    for var) with correction ``c``, as the NumPy reference's two passes, summed pairwise as
    :func:`reduce`'s; ``minmax``: ``(min, max)``. None where it does not apply."""
    k = len(axes)
    fn = kernel("stats_rows", a.dtype) if type(a) is np.ndarray and a.size and \
        a.flags.c_contiguous and tuple(axes) == tuple(range(a.ndim - k, a.ndim)) else None
    if fn is None:
        return None
    o1 = np.empty(a.shape[:a.ndim - k] + (1,) * k * keepdim, a.dtype)
    o2 = np.empty(o1.shape, a.dtype)
    fn(ptr(a), ptr(o1), ptr(o2), o1.size, a.size // o1.size, float(c),
       ("var", "std", "minmax").index(name), num_threads())
    return o1, o2


_RANK = {"kth": 0, "median": 1, "nanmedian": 2}


def rank(x, axis, what, k=0):
    """``(values, indices)`` of a float NumPy array's element at sorted rank ``k`` along
    ``axis`` (``what`` "kth"), or of its median / nanmedian / mode there (the removed axis
    dropped), as a stable sort with nan last picks it, by rank.h's quickselect per row (NumPy's
    path sorts the rows; mode: count.h); None where it does not apply."""
    mode = what == "mode"       # (count.h's sort of each row and scan of its runs)
    fn = type(x) is np.ndarray and x.size and kernel("mode_rows" if mode else "rank_rows", x.dtype)
    if not fn:
        return None
    x = contiguous(x if axis == x.ndim - 1 else np.moveaxis(x, axis, -1))
    vals, idx = np.empty(x.shape[:-1], x.dtype), np.empty(x.shape[:-1], np.int64)
    if fn(ptr(x), x.size // x.shape[-1], x.shape[-1], *(() if mode else (_RANK[what], k)),
          ptr(vals), ptr(idx), num_threads()):
        return None
    return vals, idx


def topk(x, k, largest):
    """``(values, indices)`` of the ``k`` (<= 64) largest (smallest) of each row of a float
    NumPy array, best first, ties in input order, by rank.h (one pass keeping the best ``k``);
    None where it does not apply, or where a row holds a nan."""
    fn = kernel("topk_rows", x.dtype) if type(x) is np.ndarray and 0 < k < x.shape[-1] and \
        k <= 64 else None
    if fn is None:
        return None
    x = contiguous(x)
    vals, idx = np.empty(x.shape[:-1] + (k,), x.dtype), np.empty(x.shape[:-1] + (k,), np.int64)
    if fn(ptr(x), x.size // x.shape[-1], x.shape[-1], k, largest, ptr(vals), ptr(idx),
          num_threads()):
        return None
    return vals, idx


def mask_select(a, mask):
    """``a[mask]`` for a boolean ``mask`` of ``a``'s shape, both C-contiguous NumPy arrays, by
    select.h's branch-free copy over threads; None where it does not apply (the caller then
    indexes with NumPy)."""
    word = _WORDS.get(a.itemsize)
    lib = _library() if word is not None and not _off and a.size >= _MIN_SELECT and type(a) is \
        np.ndarray and a.dtype.kind in "fiub" and a.flags.c_contiguous and \
        mask.flags.c_contiguous else None
    if lib is None:
        return None
    nt = num_threads()
    offsets = np.empty(nt + 1, np.int64)
    out = np.empty(lib.nonzero_u8_count(ptr(mask), 1, a.size, ptr(offsets), nt), a.dtype)
    getattr(lib, "mask_select" + _SUFFIX[word.char])(ptr(a), ptr(mask), ptr(out), a.size,
                                                     ptr(offsets), nt)
    return out


def mask_scatter(a, mask, src):
    """``a`` copied with ``src``'s first elements (in order) where the boolean ``mask`` of its
    shape is True (masked_scatter), all C-contiguous NumPy arrays, by select.h's branch-free
    pass over threads; None where it does not apply, or where ``src`` has too few elements."""
    word = _WORDS.get(a.itemsize)
    lib = _library() if word is not None and not _off and a.size >= _MIN_SELECT and type(a) is \
        np.ndarray and a.dtype.kind in "fiub" and a.flags.c_contiguous and \
        mask.flags.c_contiguous and src.flags.c_contiguous else None
    if lib is None:
        return None
    nt = min(num_threads(), a.size // 32768 + 1)
    offsets = np.empty(nt + 1, np.int64)
    if not 0 < lib.nonzero_u8_count(ptr(mask), 1, a.size, ptr(offsets), nt) <= src.size:
        return None
    out = np.empty_like(a)
    getattr(lib, "mask_scatter" + _SUFFIX[word.char])(ptr(a), ptr(mask), ptr(src), ptr(out),
                                                      a.size, ptr(offsets), nt)
    return out


def _nonzero_count(a):
    """``(count of a's nonzero elements, the lib, the word's kernel name, its keep mask, thread
    offsets)`` by select.h's count pass over threads for a C-contiguous NumPy array of 1 to 64
    dims from _MIN_SELECT elements; None where it does not apply."""
    lib = None if _off or type(a) is not np.ndarray or a.size < _MIN_SELECT or not \
        0 < a.ndim <= 64 or a.dtype.kind not in "fiub" or not a.flags.c_contiguous or \
        a.itemsize not in (1, 2, 4, 8) else _library()
    if lib is None:
        return None
    bits = 8 * a.itemsize       # (a float's sign bit is not looked at: -0.0 is zero)
    keep, name = (1 << bits - 1) - 1 if a.dtype.kind == "f" else -1, f"nonzero_u{bits}"
    nt = min(num_threads(), a.size // 32768 + 1)
    offsets = np.empty(nt + 1, np.int64)
    return getattr(lib, name + "_count")(ptr(a), keep, a.size, ptr(offsets), nt), lib, name, \
        keep, offsets


def count_nonzero(a):
    """``np.count_nonzero(a)`` (an int) by select.h's count pass over threads, or None where
    it does not apply (see ``_nonzero_count``)."""
    return (r := _nonzero_count(a)) and r[0]


def nonzero(a):
    """``np.argwhere(a)`` as int64 for a C-contiguous NumPy array of 1 to 64 dims, by select.h's
    count and write passes over threads; None where it does not apply."""
    if (r := _nonzero_count(a)) is None:
        return None
    count, lib, name, keep, offsets = r
    nt = len(offsets) - 1
    out = np.empty((count, a.ndim), np.int64)
    shape = np.array(a.shape, np.int64)     # (held: a temporary's address would dangle)
    getattr(lib, name)(ptr(a), keep, a.size, ptr(shape), a.ndim, ptr(out), ptr(offsets), nt)
    return out


def words(name, *arrays):
    """select.h's ``flip_rows`` (``a[..., ::-1]`` copied, 4- or 8-byte elements) or
    ``nextafter`` (C's, exact: float32 or float64) of NumPy arrays of one shape and dtype, or
    None where it does not apply."""
    a = arrays[0]
    fn = kernel(name, _WORDS.get(a.itemsize, a.dtype) if name == "flip_rows" else a.dtype) if all(
        type(x) is np.ndarray and x.shape == a.shape and x.dtype == a.dtype for x in arrays) \
        and a.size >= _MIN_SELECT and a.dtype.kind in "fiub" else None
    if fn is not None:
        arrays, out = [contiguous(x) for x in arrays], np.empty(a.shape, a.dtype)
        fn(*map(ptr, arrays), ptr(out), a.size, *a.shape[-1:] * (name == "flip_rows"),
           num_threads())
        return out


_ALONG = {}     # _along's (name, dtype, shapes, dim, rows) -> (kernel, outer, n, k, inner, shape)


def _along(name, data, dim, index, rows):
    """gather.h's kernel ``name`` along ``dim`` of ``data`` with ``index`` and its sizes
    ``(fn, outer, n, k, inner, values' shape)``, or None where it does not apply: NumPy
    float32/float64 data, an int64 index of the data's shape but along ``dim`` (``rows``,
    scatter only: a 1-D index, an entry per slice along ``dim``, as index_add's). (Called on
    every small gather and scatter: the shape tests' answer is kept per call shape.)"""
    if type(data) is not np.ndarray or type(index) is not np.ndarray or \
            index.dtype is not _I64 or _off:
        return None
    key = (name, data.dtype.char, data.shape, index.shape, dim, rows)
    if (got := _ALONG.get(key, False)) is False:      # (the shape tests once per call shape)
        shape, nd, got = data.shape, data.ndim, None
        if nd and index.ndim == (1 if rows else nd) and -nd <= dim < nd:
            d = dim % nd
            pre, post = shape[:d], shape[d + 1:]
            fn = (rows or index.shape[:d] == pre and index.shape[d + 1:] == post) and \
                kernel(name, data.dtype)
            got = fn and (fn, math.prod(pre), shape[d], index.shape[-1 if rows else d],
                          math.prod(post), pre + index.shape + post if rows else index.shape)
        if len(_ALONG) >= 256:
            _ALONG.clear()
        _ALONG[key] = got = got or None
    return got


def gather(data, dim, index):
    """gather.h's gather along ``dim`` of ``data`` (``_along``'s cases): a new array of the
    index's shape, or None where it does not apply or an index is out of range."""
    if (got := _along("gather", data, dim, index, False)) is None:
        return None
    fn, outer, n, k, inner, _ = got
    # (copies held: a temporary's address would dangle)
    data, index, out = contiguous(data), contiguous(index), np.empty(index.shape, data.dtype)
    return None if fn(ptr(data), ptr(index), ptr(out), outer, n, k, inner, num_threads()) \
        else out


def scatter(out, dim, index, values, mode, init, fresh=False, rows=False):
    """gather.h's scatter into ``out`` (C-contiguous) along ``dim``: ``values`` (the index's
    shape; ``rows``: ``out``'s but ``index.size`` along ``dim``) combined at ``index`` by
    ``mode`` (0 write, 1 add, 2 max, 3 min, 4 multiply), ``out`` filled first from ``init``:
    ``out`` itself (in place: every index is checked before anything is written), another
    array of its shape, or None for zeros; ``fresh``: the places written start from the
    mode's identity (include_self=False). True when done; False where ``_along`` or the
    values do not fit, or an index is out of range: the NumPy path then raises torch's
    error."""
    got = _along("scatter", out, dim, index, rows)
    if got is None or type(values) is not np.ndarray or values.dtype != out.dtype or \
            values.shape != got[5]:
        return False
    fn, outer, n, k, inner, _ = got
    # (copies held, as init: a temporary's address would dangle)
    index, values = contiguous(index), contiguous(values)
    init = init if init is None or init is out else contiguous(init)
    return not fn(ptr(out), ptr(index), ptr(values), ptr(init), outer, n, k, inner, mode,
                  rows + 2 * fresh, num_threads())


def parloop():
    """parloop.h's ``(parloop, parloop_reduce, {element size: its select loop's address},
    copy loop's address, {4: isclose_f32's, 8: isclose_f64's}, select.h's tri_rows,
    xor_wide, fpow_ff's and tile_loop's addresses)``
    (ember/_ops/pointwise.py runs NumPy's loops on threads with them, and tril and triu), or
    None (not built, or turned off)."""
    global _parloop
    if _parloop is None:
        import ctypes
        lib, addr = _library(), lambda f: ctypes.cast(f, ctypes.c_void_p).value
        _parloop = lib and (fast(lib.parloop), fast(lib.parloop_reduce), {
            w: addr(getattr(lib, f"select_u{8 * w}")) for w in (1, 2, 4, 8)}, addr(lib.copy_loop),
            {4: addr(lib.isclose_f32), 8: addr(lib.isclose_f64)}, fast(lib.tri_rows),
            fast(lib.xor_wide), addr(lib.fpow_ff), addr(lib.tile_loop))
    return None if _off or not _parloop else _parloop


_parloop = None


def available():
    """True when the compiled kernels are built and loadable (whatever ``EMBER_NO_C`` says)."""
    return _library() is not None


def describe():
    """One line for ``ember info``: the kernel library in use, or why there is none."""
    if not available():
        return "not built: the NumPy path runs"
    name = os.path.basename(library_path())
    build = "x86-64-v3 build (AVX2 + FMA)" if "_v3" in name else \
        "baseline build (AVX-512, AVX2 or plain copies picked per loop)"
    return f"{name}, {build}" + (" (off: EMBER_NO_C=1)" if _off else "")


@contextlib.contextmanager
def disabled():
    """Run the NumPy reference path inside the block, as ``EMBER_NO_C=1`` does for a process.

    Example:
        >>> import ember
        >>> with ember._C.kernels.disabled():
        ...     ember.softmax(ember.zeros(2), 0)
        tensor([0.5000, 0.5000])
    """
    global _off
    prev, _off = _off, True
    try:
        yield
    finally:
        _off = prev


def num_threads():
    """Threads a kernel splits its rows over: ``ember.get_num_threads()``."""
    global _config
    if _config is None:         # (ctypes and the BLAS search load on first kernel use only)
        from ... import _config
    return _config._state["threads"] or _config.get_num_threads()


_config = None      # ember._config once a kernel asked (not an import statement per call)


def with_one_blas_thread(fn, *args):
    """``fn(*args, nt)`` for a kernel whose ``nt`` OpenMP threads each call BLAS, with BLAS on
    one thread meanwhile: BLAS's own threads, woken per small GEMM inside OpenMP's, would
    oversubscribe the cores and cost more than the GEMMs. Returns ``fn``'s result."""
    from ... import _config
    nt = num_threads()
    setters = [s for f, s, _ in _config._controls() if f != "omp"] if nt > 1 else []
    for setter in setters:
        setter(1)
    try:
        return fn(*args, nt)
    finally:
        for setter in setters:
            setter(nt)


def ptr(a):
    """The data address of a NumPy array (or None), for a ctypes call."""
    return None if a is None else a.ctypes.data


if _dispatch.ext is not None:    # the same in C: a.ctypes.data builds a helper object
    ptr = _dispatch.ext.data_ptr  # noqa: F811


def contiguous(a, dtype=None):
    """``a`` as a C-contiguous array of ``dtype`` (copied only when it must be); unlike
    np.ascontiguousarray, a 0-dim array stays 0-dim."""
    if dtype is not None:
        a = a.astype(dtype, copy=False)
    return a if a.flags.c_contiguous else a.copy(order="C")
