"""Discrete Fourier transforms: the ops behind ``ember.fft`` (torch.fft).

Three kinds of transform, each over a set of dims with torch's ``n``/``s``, ``dim`` and
``norm`` arguments: complex-to-complex (fft, ifft, fftn...), real-to-complex one-sided (rfft,
ihfft) and complex-to-real (irfft, hfft). The forward is fft.h's mixed-radix FFT for float32 /
complex64 (lengths whose prime factors are <= 251, long ones by Bluestein's algorithm; see
``_kernel``), else NumPy's pocketfft, the
reference. Every backward is one adjoint transform with the dual norm ("backward" <->
"forward"), in ember ops when it must be differentiable (create_graph), else on arrays through
the forward's own code:

- c2c: the opposite-direction transform, then the zero padding or trimming of ``n``/``s``
  undone;
- r2c: the c2r of the one-sided gradient with the bins c2r counts twice halved;
- c2r: the r2c of the gradient with the bins that stand for two (Hermitian pairs) doubled.

hfft and ihfft are c2r and r2c of the conjugate with the dual norm, as in torch.
"""
import functools
import itertools
import math

import numpy as np

import ember

from .._C import kernels as _C
from .._tensor import Tensor
from .meta import empty
from .pointwise import PAR_MIN, par_copy
from .registry import op
from .tangents import LINEAR
from .samples import ErrorSample, Sample, const, make

_DUAL = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


def _norm(norm):
    if norm is None:
        return "backward"
    if norm not in _DUAL:
        raise RuntimeError(f'Invalid normalization mode: "{norm}"')
    return norm


def _dims(name, ndim, dim, unique=True):
    """``dim`` (int or sequence) as a tuple of non-negative axes, with torch's errors."""
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    out = []
    for d in dims:
        if ndim == 0:
            raise IndexError(f"{name}: Dimension specified as {d} but tensor has no dimensions")
        if not -ndim <= d < ndim:
            raise IndexError(f"{name}: Dimension out of range (expected to be in range of "
                             f"[{-ndim}, {ndim - 1}], but got {d})")
        out.append(d % ndim)
    if unique and len(set(out)) != len(out):
        raise RuntimeError(f"{name}: FFT dims must be unique")
    return tuple(out)


def _plan(name, kind, shape, s, dim, one_dim):
    """``(dims, sizes)``: the transformed axes and the signal length along each (for c2r the
    last is the real output's length), as torch's ``_canonicalize_fft_shape_and_dim_args``."""
    try:                              # (cached: ~1 us of a small call's ~8)
        return _plan_of(name, kind, shape, s, dim, one_dim)
    except TypeError:                 # (unhashable: s or dim a list)
        return _plan_of.__wrapped__(name, kind, shape, s, dim, one_dim)


@functools.lru_cache(256)
def _plan_of(name, kind, shape, s, dim, one_dim):
    ndim = len(shape)
    if one_dim:                       # fft(input, n, dim): one axis
        dims = _dims(name, ndim, dim)
        s = None if s is None else (s,)
    else:
        dims = None if dim is None else _dims(name, ndim, dim)
        if s is not None:
            s = tuple(s)
            if dims is not None and len(dims) != len(s):
                raise RuntimeError(f"{name}: When given, dim and shape arguments must have the "
                                   "same length")
            if len(s) > ndim:
                raise RuntimeError(f"{name}: Got shape with {len(s)} values but input tensor "
                                   f"only has {ndim} dimensions.")
            dims = dims if dims is not None else tuple(range(ndim - len(s), ndim))
        elif dims is None:
            dims = tuple(range(ndim))
    sizes = [shape[d] if s is None or s[i] == -1 else s[i] for i, d in enumerate(dims)]
    if kind != "c2c" and not dims:
        raise RuntimeError(f"{name} must transform at least one axis")
    if kind == "c2r" and (s is None or s[-1] == -1):
        sizes[-1] = 2 * (shape[dims[-1]] - 1)
    for n in sizes:
        if n < 1:
            raise RuntimeError(f"{name}: Invalid number of data points ({n}) specified")
    return dims, tuple(sizes)


def _input(name, kind, x):
    """The array the transform reads: integers and bools in the default float, complex where
    the transform is c2c or c2r; half precision is refused as on torch's CPU."""
    if x.dtype.itemsize == 2 and x.dtype.kind not in "iu":   # (float16, ml_dtypes' bfloat16)
        raise RuntimeError(f"{name}: Unsupported dtype "
                           f"{'Half' if x.dtype.kind == 'f' else 'BFloat16'}")
    if x.dtype.kind in "biu":
        x = x.astype(ember.get_default_dtype().np)
    if kind == "r2c" and x.dtype.kind == "c":
        names = {"complex64": "ComplexFloat", "complex128": "ComplexDouble"}
        raise RuntimeError(f"{name} expects a real input tensor, but got {names[str(x.dtype)]}")
    return x


def _compute(xp, name, kind, inverse, conj, x, s, dim, norm, one_dim):
    norm = _norm(norm)
    x = _input(name, kind, x)
    dims, sizes = _plan(name, kind, x.shape, s, dim, one_dim)
    if conj:                          # hfft / ihfft: the dual norm, and a conjugate
        norm = _DUAL[norm]
        x = xp.conj(x) if kind == "c2r" else x
    if kind == "c2c" and not dims:    # fftn of a 0-dim tensor: the value itself
        return x.astype(np.result_type(x.dtype, np.complex64), copy=True)
    out = _transform(xp, kind, inverse, x, dims, sizes, norm)
    return xp.conj(out) if conj and kind == "r2c" else out


def _transform(xp, kind, inverse, x, dims, sizes, norm):
    """The transform of ``x`` over ``dims``, fitted to ``sizes``: fft.h's where it applies,
    else NumPy's pocketfft (the reference)."""
    out = _kernel(kind, inverse, x, dims, sizes, norm) if xp is np else None
    if out is not None:
        return out
    f = {"c2c": xp.fft.ifftn if inverse else xp.fft.fftn, "r2c": xp.fft.rfftn,
         "c2r": xp.fft.irfftn}[kind]
    return f(x, s=sizes, axes=dims, norm=norm)


@functools.lru_cache(64)
def _twiddles(n):
    """``exp(-2 pi i k / n)``, k < n, as complex64 (computed in double)."""
    return np.exp(np.arange(n) * (-2j * np.pi / n)).astype(np.complex64)


@functools.lru_cache(256)
def _unsmooth(sizes):
    return any(_largest_prime(n) > _MAXP and n < _BLUESTEIN for n in sizes)


@functools.lru_cache(256)
def _largest_prime(n):
    # (cached: trial division to sqrt(n) on every transform's sizes, ~1,000 steps at 1M)
    p, big = 2, 1
    while p * p <= n:
        while n % p == 0:
            n, big = n // p, p
        p += 1
    return max(big, n)


_C64, _F32 = np.dtype(np.complex64), np.dtype(np.float32)
# an odd length's r2c and c2r through fft.h are a c2c of twice the work: above this, pocketfft's
# real transforms win unless a factor is a large prime (1M float32 rfft at one thread, CPU time:
# fft.h 12.3 ms, NumPy 9.1)
_SMALL = 4096
_BLUESTEIN = 1 << 16
_MAXP = 251                     # fft.h's FFT_MAXP: its largest prime radix


def _kernel(kind, inverse, x, dims, sizes, norm):
    """fft.h's transform of a float32/complex64 NumPy array: a c2c pass per dim, r2c and c2r as
    real transforms along the last dim (``_real``, an even length there) or else (small, or a
    large prime factor) as the c2c of the real input cut to its one-sided half / of the
    Hermitian extension. A real input's c2c over trailing dims (fft2 of a real image) is the r2c
    and the c2c of the other dims on the half, then the mirrored half conjugated
    (``_hermitian``). A length with a prime factor above 251 is Bluestein's convolution when
    long, else (None) pocketfft's."""
    fn = (_C._fast.get(("fft_c2c", "f")) or _C.kernel("fft_c2c", _F32)) if x.dtype.char in \
        "fF" and type(x) is np.ndarray else None
    # NOTE: a length with a prime factor above 251 is Bluestein's only when long: shorter, the
    # convolution's two transforms and three passes lose to pocketfft's (in double)
    if fn is None or _unsmooth(sizes):
        return None
    n = sizes[-1]
    if len(dims) == 1 and kind != "c2c" and dims[0] == x.ndim - 1 and n % 2 == 0 and \
            x.shape[-1] == (n // 2 + 1 if kind == "c2r" else n):
        # (one dim, no padding: the real transform alone, ~1.5 us less Python a small call)
        if (out := _real(fn, x, n, kind == "c2r", norm)) is not None:
            return out
    dims, sizes, last = list(dims), list(sizes), dims[-1]
    n, nd = sizes.pop(), len(dims)
    even = n % 2 == 0 and last == x.ndim - 1
    if kind != "c2c" and not even and x.size > _SMALL and _largest_prime(n) <= 61:
        return None                   # (pocketfft's real transforms do half the work, where
        # its passes are not generic: at 916 x 1145 = 5 * 229 fft.h's c2c takes half its time)
    inverse = inverse if kind == "c2c" else kind == "c2r"     # (hfft, ihfft: conjugates)
    if kind == "c2r":
        dims.pop()
        h = _fit(x, (last,), (n // 2 + 1,))
        for d, k in zip(dims, sizes):
            h = _pass(fn, h, d, k, True, norm)
        if even:
            return _real(fn, h, n, True, norm)
        tail = np.conj(h[(slice(None),) * last + (slice(n - n // 2 - 1, 0, -1),)])
        return _pass(fn, np.concatenate([h, tail], last), last, n, True, norm).real.copy()
    # a real input's full spectrum from its half: computed forward (ifft's is the conjugate);
    # not with an inf (h None: the split's result differs from a c2c's, NumPy's), nor small
    # (the mirror's NumPy calls cost more than the c2c's other half)
    full = kind == "c2c" and x.dtype.char == "f" and even and x.size > _SMALL and \
        sorted(dims) == list(range(x.ndim - nd, x.ndim))
    fnorm = _DUAL[norm] if full and inverse else norm
    h = _real(fn, x if x.shape[last] == n else _fit(x, (last,), (n,)), n, False, fnorm) \
        if even and (full or kind == "r2c") else None
    full = full and h is not None
    if full:
        norm, conj, inverse = fnorm, inverse, False
    if kind == "r2c" or full:
        dims.pop()
        x = h if h is not None else \
            _pass(fn, x, last, n, False, norm)[(slice(None),) * last + (slice(0, n // 2 + 1),)]
    else:
        sizes.append(n)
    for d, k in zip(dims[::-1], sizes[::-1]):
        x = _pass(fn, x, d, k, inverse, norm)
    # (an rfft's half, as torch's: a new contiguous array)
    return _hermitian(x, nd, n, conj) if full else np.ascontiguousarray(x)


def _scale(n, inverse, norm):
    return 1 / math.sqrt(n) if norm == "ortho" else 1 / n if (norm == "forward") != inverse \
        else 1.0


def _pass(fn, x, axis, n, inverse, norm):
    """fft.h's c2c of ``x`` along ``axis``, zero-padded or cut to ``n``."""
    scale, w, big, _ = _pass_plan(n, inverse, norm)
    if big:
        return _bluestein(fn, x, axis, n, inverse, scale)
    if x.dtype is not _C64 or not x.flags.c_contiguous:
        x = _C.contiguous(x, _C64)
    shape = x.shape
    out = np.empty(shape[:axis] + (n,) + shape[axis + 1:], _C64)
    fn(_C.ptr(x), _C.ptr(out), math.prod(shape[:axis]), shape[axis], n,
       math.prod(shape[axis + 1:]), w, inverse, scale, _C.num_threads())
    return out


@functools.lru_cache(256)
def _pass_plan(n, inverse, norm):
    """(a small call's cost: one cache look-up for the scale, the twiddles' address and
    whether the length needs Bluestein's)"""
    w = _twiddles(n)                  # (held here: the pointer outlives _twiddles' cache entry)
    return _scale(n, inverse, norm), _C.ptr(w), _largest_prime(n) > _MAXP, w


def _real(fn, x, n, inverse, norm):
    """fft.h's r2c of the real ``x`` (``n`` points, even) or c2r of the one-sided ``x`` (n // 2
    + 1 bins) along the last axis, as one n / 2-point c2c (its even and odd samples as the real
    and imaginary parts); around Bluestein's c2c for a half with a large prime factor."""
    h, lines, axis = n // 2, x.size // x.shape[-1], x.ndim - 1
    x = _C.contiguous(x, _C64 if inverse else _F32).view(_C64)
    out = np.empty(x.shape[:-1] + (h + (not inverse),), _C64)
    scale, w, big, _ = _real_plan(n, inverse, norm)
    if big and not inverse:
        x, scale = _C.contiguous(_bluestein(fn, x, axis, h, False, scale)), 1.0
    if fn(_C.ptr(x), _C.ptr(out), lines, x.shape[-1], h, 1, w, 2 | inverse | 4 * big,
          1.0 if big and inverse else scale, _C.num_threads()):
        return None                   # (an inf or a NaN: see fft_c2c_f32)
    if big and inverse:
        out = _C.contiguous(_bluestein(fn, out, axis, h, True, scale))
    return out.view(_F32) if inverse else out


@functools.lru_cache(64)
def _real_plan(n, inverse, norm):
    w = _twiddles(n)                  # (held here: the pointer outlives _twiddles' cache entry)
    return _scale(n, inverse, norm), _C.ptr(w), _largest_prime(n // 2) > _MAXP, w


def _hermitian(h, nd, n, conj):
    """The full spectrum (of length ``n`` along the last axis) of a real input's transform
    over its last ``nd`` axes from its one-sided half ``h``: bin k is the conjugate of bin -k
    (mod each length), conjugated throughout when ``conj``."""
    out, m = np.empty(h.shape[:-1] + (n,), h.dtype), h.shape[-1]
    first, other = (np.conjugate, np.positive) if conj else (np.positive, np.conjugate)
    first(h, out=out[..., :m])
    lead = (slice(None),) * (h.ndim - nd)
    for mirror in itertools.product((False, True), repeat=nd - 1):
        dst = lead + tuple(slice(1, None) if f else slice(0, 1) for f in mirror)
        src = lead + tuple(slice(None, 0, -1) if f else slice(0, 1) for f in mirror)
        other(h[src + (slice(n - m, 0, -1),)], out=out[dst + (slice(m, None),)])
    return out


def _bluestein(fn, x, axis, n, inverse, scale):
    """The DFT of a length with a prime factor fft.h has no pass for, as a convolution
    (Bluestein's): with jk = (j^2 + k^2 - (k - j)^2) / 2, X = c * ((x c) conv conj(c)) for the
    chirp c_j = W_n^{j^2 / 2}, the convolution two smooth FFTs of length m >= 2n - 1."""
    c, bf, m = _chirp(n, inverse)
    along = (-1,) + (1,) * (x.ndim - axis - 1)
    k = min(x.shape[axis], n)
    a = x[(slice(None),) * axis + (slice(0, k),)] * c[:k].reshape(along)
    a = _pass(fn, a, axis, m, False, "backward")
    a *= bf.reshape(along)
    a = _pass(fn, a, axis, m, True, "forward")        # (unscaled: the 1 / m is in bf)
    a = a[(slice(None),) * axis + (slice(0, n),)]
    a *= (c * np.float32(scale)).reshape(along)
    return a


@functools.lru_cache(16)
def _chirp(n, inverse):
    """Bluestein's chirp ``exp(-/+ i pi j^2 / n)`` (j^2 taken mod 2n so the angle is exact), the
    FFT of its conjugate's circular extension to a smooth length m >= 2n - 1 over m, and m."""
    m = 2 * n - 1
    while _largest_prime(m) > 7:
        m += 1
    j = np.arange(n, dtype=np.int64)
    c = np.exp((1j if inverse else -1j) * np.pi * ((j * j) % (2 * n)) / n)
    b = np.zeros(m, np.complex128)
    b[:n], b[m - n + 1:] = c.conj(), c.conj()[:0:-1]
    return c.astype(_C64), (np.fft.fft(b) / m).astype(_C64), m


def _meta(name, kind, x, s, dim, one_dim):
    x = _input(name, kind, x)
    dims, sizes = _plan(name, kind, x.shape, s, dim, one_dim)
    shape = list(x.shape)
    for d, n in zip(dims, sizes):
        shape[d] = n
    if kind == "r2c":
        shape[dims[-1]] = sizes[-1] // 2 + 1
    dt = np.result_type(x.dtype, np.complex64)
    return empty(shape, dt.type(0).real.dtype if kind == "c2r" else dt)


# ---- backward: adjoint transforms in ember ops ------------------------------------------------


def _fit(t, dims, sizes):
    """``t`` (a Tensor or an array) zero-padded or trimmed along ``dims`` to ``sizes``."""
    if [t.shape[d] for d in dims] == list(sizes):
        return t
    want = list(t.shape)
    for d, n in zip(dims, sizes):
        want[d] = n
    if not isinstance(t, ember.Tensor):
        out = np.zeros(want, t.dtype)
        common = tuple(slice(0, min(a, b)) for a, b in zip(t.shape, want))
        out[common] = t[common]
        return out
    first = min(dims)
    pad = []
    for d in range(t.dim() - 1, first - 1, -1):
        pad += [0, want[d] - t.shape[d]]
    return ember.constant_pad_nd(t, pad)


def _grad(name, kind, inverse, conj, g, input, s, dim, norm, one_dim):
    dims, sizes = _plan(name, kind, tuple(input.shape), s, dim, one_dim)
    norm = _norm(norm)
    from .nn import kernel_grads      # (a family of its own, loaded on first use)
    arrays = kernel_grads(g)          # nothing differentiates it: the forward's own code on arrays
    g = arrays[0] if arrays else g
    if conj:                          # d conj(y) = conj(dy): conjugate around the plain kind
        norm = _DUAL[norm]
        g = g.conj() if kind == "r2c" else g

    def transform(t, kind, inverse):  # with the dual norm, as torch's backward formulas
        if arrays:
            return _transform(np, kind, inverse, t, dims, sizes, _DUAL[norm])
        f = {"c2c": ember.fft.ifftn if inverse else ember.fft.fftn, "r2c": ember.fft.rfftn,
             "c2r": ember.fft.irfftn}[kind]
        return f(t, s=sizes, dim=dims, norm=_DUAL[norm])

    if kind == "c2c":
        gi = transform(g, "c2c", not inverse)
    elif kind == "r2c":
        # the adjoint of a one-sided transform is the c2r of its gradient with the bins that c2r
        # counts twice (all but 0 and, for even n, the middle one) halved
        gi = transform(g * _weights(g, dims[-1], sizes[-1], 0.5), "c2r", True)
    else:
        # NOTE: as torch's fft_c2r_backward: each one-sided bin other than 0 (and the middle one
        # for even n) stands for itself and its conjugate partner, so its gradient counts twice.
        gi = transform(g, "r2c", False)
        gi = gi * _weights(gi, dims[-1], sizes[-1], 2.0)
        gi = gi.conj() if conj else gi
    gi = _fit(gi, dims, [input.shape[d] for d in dims])
    return Tensor._wrap(np.ascontiguousarray(gi)) if arrays else gi


def _weights(t, dim, n, value):
    """Ones along ``dim`` of the one-sided ``t`` of an ``n``-point transform, ``value`` at the
    bins with a conjugate partner; shaped to broadcast against ``t``."""
    m = t.shape[dim]
    w = np.ones(m)
    w[1:1 + n - m] = value
    w = w.reshape([m if d == dim else 1 for d in range(t.ndim)])
    if isinstance(t, np.ndarray):
        return w.astype(t.real.dtype)
    return ember.tensor(w, dtype=t.real.dtype, device=t.device)


# ---- the ops ----------------------------------------------------------------------------------

# (torch name, kind, inverse, conjugate-and-dual-norm)
_FAMILY = {"fft": ("c2c", False, False), "ifft": ("c2c", True, False),
           "rfft": ("r2c", False, False), "irfft": ("c2r", True, False),
           "hfft": ("c2r", False, True), "ihfft": ("r2c", True, True)}


def _make(base, arity):
    kind, inverse, conj = _FAMILY[base]
    name = base if arity == 1 else f"{base}2" if arity == 2 else f"{base}n"
    one = arity == 1

    def compute(xp, input, s, dim, norm):
        return _compute(xp, name, kind, inverse, conj, input, s, dim, norm, one)

    # three signatures, as torch's: fft(input, n, dim=-1), fft2(input, s, dim=(-2, -1)),
    # fftn(input, s, dim=None); the OpDef reads its parameters off the forward's signature
    if arity == 1:
        def fwd(xp, input, n=None, dim=-1, norm=None):
            return compute(xp, input, n, dim, norm)
    elif arity == 2:
        def fwd(xp, input, s=None, dim=(-2, -1), norm=None):
            return compute(xp, input, s, dim, norm)
    else:
        def fwd(xp, input, s=None, dim=None, norm=None):
            return compute(xp, input, s, dim, norm)
    fwd.__doc__ = _doc(base, name, arity)
    d = op(f"fft_{name}", method=False, function=False)(fwd)
    d.torch_fn = f"fft.{name}"
    d.public_name = name

    @d.vjp()
    def _(g, input, *args, **kwargs):
        s, dim, norm = _args(d, args, kwargs)
        return _grad(name, kind, inverse, conj, g, input, s, dim, norm, one)

    def meta(x, *args, **kwargs):
        s, dim, _ = _args(d, args, kwargs)
        return _meta(name, kind, x, s, dim, one)

    d.meta = meta
    d.grad_name_of = _node(d, base, arity)
    d.samples = lambda dev, dt: _samples(kind, arity, dt)
    d.errors = _errors(name, kind, arity)
    d.jvp = LINEAR
    return d


def _node(d, base, arity):
    """torch's node of fft ``base`` over ``arity`` dims (3: n): that of its last transform
    (real-to-complex, complex-to-real or complex), or of the conjugate that follows one (an
    ifft of a real input, an ihfft over one dim)."""
    def rule(input, *args, **kwargs):
        if base in ("rfft", "irfft", "hfft"):
            return "FftR2CBackward0" if base == "rfft" else "FftC2RBackward0"
        if base == "ihfft":
            s, dim, _ = _args(d, args, kwargs)
            dims = dim if dim is not None else s if s is not None else input.shape
            one = arity == 1 or len(dims) == 1
            return "ConjBackward0" if one else "FftC2CBackward0"
        if arity > 1 or input.is_complex():
            return "FftC2CBackward0"
        return "FftR2CBackward0" if base == "fft" else "ConjBackward0"
    return rule


def _args(d, args, kwargs):
    """``(s, dim, norm)`` of a call, positional or by keyword, defaults filled in."""
    vals = dict(zip(d.params[1:], args))
    vals.update(kwargs)
    p = d.params
    return (vals.get(p[1], d.defaults[p[1]]), vals.get(p[2], d.defaults[p[2]]),
            vals.get("norm"))


_DOCS = {
    "fft": """The discrete Fourier transform of ``input`` over {dims}.

    ``n``/``s`` zero-pads or trims each transformed dim first; ``norm`` is ``"backward"`` (no
    scaling, the default), ``"ortho"`` (1/sqrt(n)) or ``"forward"`` (1/n). Real inputs give
    complex64 from float32 and complex128 from float64. See torch.fft.{name}.
""",
    "ifft": """The inverse discrete Fourier transform of ``input`` over {dims}; ``norm``
    ``"backward"`` (the default) scales by 1/n. See torch.fft.{name}.
""",
    "rfft": """The Fourier transform of a real ``input`` over {dims}, keeping the
    ``n // 2 + 1`` non-redundant bins of the last transformed dim. See torch.fft.{name}.
""",
    "irfft": """The inverse of rfft over {dims}: a one-sided Hermitian spectrum to a real
    signal, of length ``n`` along the last dim (default ``2 * (m - 1)`` for ``m`` input bins).
    See torch.fft.{name}.
""",
    "hfft": """The Fourier transform over {dims} of a Hermitian-symmetric signal given by its
    one-sided half: a real output, of length ``n`` along the last dim (default ``2 * (m - 1)``).
    See torch.fft.{name}.
""",
    "ihfft": """The inverse of hfft over {dims}: a real ``input`` to the one-sided half of its
    inverse transform. See torch.fft.{name}.
""",
}

# examples: (input, printed result) for the 1-D function and for the 2-D/n-D ones
_REAL1, _REAL2 = "[1., 2., 3., 4.]", "[[1., 2.], [3., 4.]]"
_HALF1, _HALF2 = "[10.+0.j, -2.+2.j, -2.+0.j]", "[[4.+0.j, 2.+0.j], [1.+0.j, 0.+0.j]]"
_EXAMPLES = {
    "fft": ("tensor([10.+0.j, -2.+2.j, -2.+0.j, -2.-2.j])",
            "tensor([[10.+0.j, -2.+0.j],\n                [-4.+0.j,  0.+0.j]])"),
    "ifft": ("tensor([ 2.5000+0.0000j, -0.5000-0.5000j, -0.5000+0.0000j, -0.5000+0.5000j])",
             "tensor([[ 2.5000+0.j, -0.5000+0.j],\n                [-1.0000+0.j,  0.0000+0.j]])"),
    "rfft": ("tensor([10.+0.j, -2.+2.j, -2.+0.j])",
             "tensor([[10.+0.j, -2.+0.j],\n                [-4.+0.j,  0.+0.j]])"),
    "irfft": ("tensor([1., 2., 3., 4.])",
              "tensor([[1.7500, 0.7500],\n                [1.2500, 0.2500]])"),
    "hfft": ("tensor([ 4., 16., 12.,  8.])", "tensor([[7., 3.],\n                [5., 1.]])"),
    "ihfft": ("tensor([ 2.5000-0.0000j, -0.5000-0.5000j, -0.5000-0.0000j])",
              "tensor([[ 2.5000-0.j, -0.5000-0.j],\n                [-1.0000-0.j,  0.0000-0.j]])"),
}


def _doc(base, name, arity):
    dims = {1: "``dim``", 2: "the two dims ``dim``", 3: "the dims ``dim`` (all by default)"}
    half = base in ("irfft", "hfft")
    x = (_HALF1 if half else _REAL1) if arity == 1 else (_HALF2 if half else _REAL2)
    return _DOCS[base].format(dims=dims[arity], name=name) + f"""
    Example:
        >>> ember.fft.{name}(ember.tensor({x}))
        {_EXAMPLES[base][arity > 1]}
    """


# ---- samples ----------------------------------------------------------------------------------


def _samples(kind, arity, dt):
    if dt.name in ("float16", "bfloat16"):
        return [Sample(make((3, 4), dt))]          # refused, as torch's CPU refuses them
    cx = dt.to_complex() if dt.category == 2 else dt
    x = (lambda shape, seed=0: make(shape, cx, seed=seed)) if kind == "c2r" else \
        (lambda shape, seed=0: make(shape, dt, seed=seed))
    norms = [Sample(x((5,)), norm=m) for m in ("ortho", "forward")]
    if arity == 1:
        return [Sample(x((6,))), Sample(x((3, 5)), 4, 0), Sample(x((2, 5)), 8),
                Sample(x((4, 3), 1), dim=0, norm="ortho"),
                Sample(x((5, 4), 2).T, n=7, norm="forward")] + norms
    if arity == 2:
        return [Sample(x((4, 6))), Sample(x((2, 3, 5)), (4, 4)),
                Sample(x((3, 4, 2), 1), dim=(0, 2), norm="ortho"),
                Sample(x((5, 3), 2), s=(3, 7), norm="forward")]
    return [Sample(x((4, 5))), Sample(x((2, 3, 4)), (3, 5)),
            Sample(x((3, 4, 2), 1), dim=(2, 0), norm="ortho"),
            Sample(x((3, 4, 5), 2), s=(-1, 6), dim=(0, 1), norm="forward"),
            Sample(x((6,), 3), norm="forward")]


def _errors(name, kind, arity):
    one = arity == 1
    x = const(3, 4)
    out = [ErrorSample(Sample(x, norm="bad"), RuntimeError, "Invalid normalization mode"),
           ErrorSample(Sample(x, **({"n": 0} if one else {"s": (0, 4)})), RuntimeError,
                       r"Invalid number of data points \(0\) specified"),
           ErrorSample(Sample(x, dim=2 if one else (0, 2)), IndexError,
                       "Dimension out of range"),
           ErrorSample(Sample(const(3, 4, dtype=np.float16)), RuntimeError,
                       "Unsupported dtype Half")]
    if arity == 3:
        out.append(ErrorSample(Sample(x, s=(2, 2, 2)), RuntimeError,
                               "Got shape with 3 values but input tensor only has 2 dimensions"))
    if not one:
        out += [ErrorSample(Sample(const(3, 4), s=(2, 2), dim=(0,)), RuntimeError,
                            "dim and shape arguments must have the same length"),
                ErrorSample(Sample(const(3, 4), dim=(0, 0)), RuntimeError,
                            "FFT dims must be unique")]
    if kind == "r2c":
        out.append(ErrorSample(Sample(const(3, 4, dtype=np.complex64)), RuntimeError,
                               "expects a real input tensor, but got ComplexFloat"))
    return out


TRANSFORMS = {d.public_name: d for d in (_make(b, a) for b in _FAMILY for a in (1, 2, 3))}


# ---- shifts -----------------------------------------------------------------------------------


def _shifts(name, sign, shape, dim):
    """fftshift's (``sign`` 1) or ifftshift's (-1) ``(shifts, dims)`` for ``_roll``."""
    # NOTE: as torch's (a roll per listed dim), a repeated dim shifts twice
    dims = tuple(range(len(shape))) if dim is None else _dims(name, len(shape), dim, False)
    if not dims:
        raise RuntimeError(f"{name}: `shifts` required")
    return [sign * (shape[d] // 2) for d in dims], dims


@functools.lru_cache(maxsize=64)
def _shift_index(name, sign, shape, dim):
    """The flat positions a small shift reads, in its output's shape."""
    return _roll(np, np.arange(math.prod(shape)).reshape(shape), *_shifts(name, sign, shape, dim))


def _shift(name, sign):
    def fwd(xp, input, dim=None):
        if xp is np and input.size <= 4096:    # (one take of cached positions: one NumPy call)
            return input.take(_shift_index(name, sign, input.shape, dim if dim is None or
                                           isinstance(dim, int) else tuple(dim)))
        return _roll(xp, input, *_shifts(name, sign, input.shape, dim))
    fwd.__doc__ = f"""``input`` rolled by ``{'' if sign > 0 else '-'}n // 2`` along each dim of
    ``dim`` (all by default): {"the zero frequency moves to the centre"
                               if sign > 0 else "undoes fftshift"}. See torch.fft.{name}.

    Example:
        >>> ember.fft.{name}(ember.arange(5))
        tensor([{"3, 4, 0, 1, 2" if sign > 0 else "2, 3, 4, 0, 1"}])
    """
    d = op(f"fft_{name}", method=False, function=False)(fwd)
    d.torch_fn, d.public_name = f"fft.{name}", name
    d.samples = lambda dev, dt: [Sample(make((5,), dt)), Sample(make((4, 5), dt)),
                                 Sample(make((3, 4, 5), dt), (0, 2)),
                                 Sample(make((3, 4), dt), dim=-1)]
    d.errors = [ErrorSample(Sample(const(3, 4), dim=2), IndexError, "Dimension out of range"),
                ErrorSample(Sample(const()), RuntimeError, "`shifts` required")]
    return d


def _roll(xp, x, shifts, dims):
    """``xp.roll(x, shifts, dims)`` as one block copy per combination of the dims' two parts
    (np.roll's own argument handling costs ~8 us a call), large ones over threads."""
    total = {}
    for d, k in zip(dims, shifts):
        total[d] = (total.get(d, 0) + k) % max(x.shape[d], 1)
    if len(total) == 1 and (xp is not np or x.size < PAR_MIN):   # one NumPy call (~1 us)
        (d, k), = total.items()
        lead = (slice(None),) * d
        return xp.concatenate((x[lead + (slice(x.shape[d] - k, None),)],
                               x[lead + (slice(0, x.shape[d] - k),)]), axis=d)
    out = xp.empty(x.shape, x.dtype)
    for parts in itertools.product(*[((d, slice(k, None), slice(0, x.shape[d] - k)),
                                      (d, slice(0, k), slice(x.shape[d] - k, None)))
                                     for d, k in total.items()]):
        dst, src = [slice(None)] * x.ndim, [slice(None)] * x.ndim
        for d, a, b in parts:
            dst[d], src[d] = a, b
        if xp is np:                  # (torch splits a roll's copy over its threads)
            par_copy(out[tuple(dst)], x[tuple(src)], 4096)
        else:
            out[tuple(dst)] = x[tuple(src)]
    return out


fftshift, ifftshift = _shift("fftshift", 1), _shift("ifftshift", -1)
fftshift.vjp()(lambda g, input, dim=None: ifftshift(g, dim))
fftshift.grad_name = ifftshift.grad_name = "RollBackward0"
ifftshift.vjp()(lambda g, input, dim=None: fftshift(g, dim))
fftshift.jvp = ifftshift.jvp = LINEAR
