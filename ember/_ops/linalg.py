"""Matrix products: matmul, mm, bmm, mv, dot, outer, addmm, baddbmm, addbmm, addmv, addr, vdot,
tensordot, inner, kron, cdist, cross."""
import functools
import math
import operator

import numpy as np

import ember

from . import gemm
from .._C import kernels as _C
from .meta import empty, moveaxis
from .pointwise import type_name
from .tangents import PRODUCT, decomposed, multilinear
from .registry import op
from .samples import ErrorSample, Sample, const, dtype_error, make


_F32 = np.dtype(np.float32)


def _check_dtypes(name, a, b):
    if a.dtype == np.bool_:
        raise NotImplementedError(f"\"{name}\" not implemented for 'Bool'")
    if a.dtype != b.dtype:
        raise RuntimeError(f"{name}: expected m1 and m2 to have the same dtype, but got: "
                           f"{a.dtype} != {b.dtype}")


@op("matmul", tags=("autocast_lower",))
def matmul(xp, input, other):
    """Matrix product with NumPy/torch broadcasting over batch dimensions."""
    dt = input.dtype
    if dt is other.dtype and dt.kind in "fc" and input.ndim == 2 == other.ndim:
        # the common case with the fewest Python steps: numpy.matmul is one BLAS call (or,
        # float32, ember's GEMM), and a shape mismatch falls through to the checks below for
        # torch's message
        out = gemm.matmul2d(input, other) if dt is _F32 and xp is np else None
        if out is not None:
            return out
        try:
            return xp.matmul(input, other)
        except ValueError:
            pass
    _check_dtypes("matmul", input, other)
    if input.ndim == 0 or other.ndim == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are "
                           f"{input.ndim}D and {other.ndim}D")
    k1 = input.shape[-1]
    k2 = other.shape[-2] if other.ndim > 1 else other.shape[0]
    if k1 != k2:
        a = input.shape if input.ndim > 1 else (1,) + input.shape
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({a[-2]}x{a[-1]} and "
                           f"{k2}x{other.shape[-1] if other.ndim > 1 else 1})")
    if ember._dtype.is_ml_dtypes(input.dtype):
        # NOTE: bf16/fp8 have no BLAS kernel: multiply in float32 and round once, as torch does
        return xp.matmul(input.astype(np.float32), other.astype(np.float32)).astype(input.dtype)
    if input.ndim + other.ndim == 3:
        return _matvec(xp, input, other)
    out = gemm.matmul(input, other) if xp is np else None
    return xp.matmul(input, other) if out is None else out


def _matvec(xp, a, b):
    """``a @ b`` of a matrix and a vector. At several threads a large one runs BLAS on one:
    the product is memory-bound, and OpenBLAS's threads, woken per call, cost more than the
    second one gains (2.5x one thread's time at 2 threads)."""
    if xp is np and max(a.size, b.size) >= 1 << 16 and _C.num_threads() > 1:
        return _C.with_one_blas_thread(lambda nt: xp.matmul(a, b))
    return xp.matmul(a, b)


# multiply-adds up to which _small_mm's loop and its one pass beat numpy.matmul's call and
# _scale_add's passes (a plain product: numpy.matmul's call alone costs fewer instructions)
_SMALL = 1 << 12


def _small_mm(xp, a, b, input=None, beta=0, alpha=1):
    """``alpha * (a @ b) + beta * input`` in one call of factor.h's small_mm: a float a (2-D,
    or 3-D with b's batch) and b (2-D, 3-D or a vector) of at most _SMALL multiply-adds,
    input None or of the product's shape or trailing dims'. numpy.matmul's call and
    _scale_add's passes cost more than torch's whole call (~1 us each). None elsewhere: the
    caller's path, which raises the errors. (The shape tests' answer is kept per call
    signature: they were most of a small call's time.)"""
    if xp is not np or _C._off or type(alpha) not in (int, float) or \
            type(beta) not in (int, float):
        return None
    beta = 0 if input is None else beta
    key = (a.dtype.char, a.shape, a.strides, b.dtype.char, b.shape, b.strides) + (
        (input.dtype.char, input.shape, input.strides) if beta else ())
    if (plan := _MM_PLANS.get(key, False)) is False:
        if len(_MM_PLANS) >= 256:
            _MM_PLANS.clear()
        plan = _MM_PLANS[key] = _mm_plan(a, b, input if beta else None)
    if plan is None:
        return None
    fn, shape = plan
    out = np.empty(shape, a.dtype)
    fn(_C.ptr(a), _C.ptr(b), _C.ptr(out), _C.ptr(input) if beta else 0, float(alpha), float(beta))
    return out


_MM_PLANS = {}      # _small_mm's call signature -> _mm_plan's answer


def _mm_plan(a, b, input):
    """``(kernel with its size and stride arguments bound, out shape)`` of _small_mm's call,
    or None where it does not apply (``input``: None where beta is 0)."""
    nd, vec = a.ndim, b.ndim == 1
    if b.dtype is not a.dtype or nd != (2 if vec else b.ndim) or nd > 3:
        return None
    (*c, m, k), sb, n = a.shape, b.shape, 1 if vec else b.shape[-1]
    if k != sb[vec - 2] or (c and c[0] != sb[0]) or (c[0] if c else 1) * m * n * k > _SMALL or \
            not (fn := _C.kernel("small_mm", a.dtype)):
        return None
    shape, si = (m,) if vec else a.shape[:-1] + (n,), (0, 0, 0)
    if input is not None:        # (an input broadcast on a size-1 dim takes _scale_add)
        if input.dtype is not a.dtype or input.shape != shape[len(shape) - input.ndim:]:
            return None
        si = (0, input.strides[0], 0) if vec and input.ndim else \
            ((0, 0, 0) + input.strides)[-3:]
    sa, sb = ((0,) + a.strides)[-3:], (0, b.strides[0], 0) if vec else ((0,) + b.strides)[-3:]
    return functools.partial(fn, *sa, *sb, c[0] if c else 1, m, n, k, *si), shape


@matmul.vjp(save=("input", "other"), needed_by="cross")
def _(g, input, other):
    a, b = input, other
    if a.dim() == 1 and b.dim() == 1:
        return g * b.conj(), g * a.conj()
    a2 = a.unsqueeze(0) if a.dim() == 1 else a
    b2 = b.unsqueeze(-1) if b.dim() == 1 else b
    g2 = g.unsqueeze(-2) if a.dim() == 1 else g
    g2 = g2.unsqueeze(-1) if b.dim() == 1 else g2
    ga = g2 @ b2.mT.conj()
    gb = a2.mT.conj() @ g2
    if a.dim() == 1:
        ga = ga.squeeze(-2)
    if b.dim() == 1:
        gb = gb.squeeze(-1)
    return ga, gb


def _matmul_meta(a, b):
    sa = a.shape if a.ndim > 1 else (1,) + a.shape
    sb = b.shape if b.ndim > 1 else b.shape + (1,)
    batch = np.broadcast_shapes(sa[:-2], sb[:-2])
    shape = batch + ((sa[-2],) if a.ndim > 1 else ()) + ((sb[-1],) if b.ndim > 1 else ())
    return empty(shape, np.result_type(a, b))


matmul.meta = _matmul_meta
matmul.samples = lambda dev, dt: [
    Sample(make((3, 4), dt), make((4, 5), dt, seed=1)),
    Sample(make((4,), dt), make((4, 5), dt, seed=1)),
    Sample(make((3, 4), dt), make((4,), dt, seed=1)),
    Sample(make((4,), dt), make((4,), dt, seed=1)),
    Sample(make((2, 3, 4), dt), make((4, 2), dt, seed=1)),
    Sample(make((2, 1, 3, 4), dt), make((3, 4, 2), dt, seed=1))] if dt.category >= 1 else []


_MATMUL_NODES = {(1, 1): "DotBackward0", (2, 1): "MvBackward0", (1, 2): "SqueezeBackward4",
                 (2, 2): "MmBackward0"}


def matmul_node(a, b):
    """torch's node of matmul of ``a``-dim by ``b``-dim operands: the last op of its case."""
    # NOTE: torch computes 2-d @ batched as the transpose of a batched product, made contiguous
    return _MATMUL_NODES.get((a, b)) or ("CloneBackward0" if a == 2 else "UnsafeViewBackward0")


matmul.grad_name_of = lambda input, other: matmul_node(input._data.ndim, other._data.ndim)


def _check_2d(name, *arrays):
    for a in arrays:
        if a.ndim != 2:
            raise RuntimeError(f"{name}: expected 2D tensors, got {a.ndim}D")


@op("mm", tags=("autocast_lower",))
def mm(xp, input, mat2):
    """Product of two matrices (no broadcasting)."""
    _check_2d("mm", input, mat2)
    return matmul.fwd(xp, input, mat2)


mm.vjp(save=("input", "mat2"), needed_by="cross")(lambda g, input, mat2: (g @ mat2.mT.conj(),
                                                        input.mT.conj() @ g))
mm.meta = _matmul_meta
mm.errors = [ErrorSample(Sample(np.ones((3, 4)), np.ones((5, 2))), RuntimeError,
                         r"shapes cannot be multiplied \(3x4 and 5x2\)")]
mm.samples = lambda dev, dt: [Sample(make((3, 4), dt), make((4, 5), dt, seed=1))] \
    if dt.category >= 1 else []


@op("bmm", tags=("autocast_lower",))
def bmm(xp, input, mat2):
    """Batched product of (b, n, m) and (b, m, p) tensors."""
    if input.ndim != 3 or mat2.ndim != 3:
        raise RuntimeError(f"bmm: batch1 must be a 3D tensor, got {input.ndim}D and "
                           f"{mat2.ndim}D")
    if input.shape[0] != mat2.shape[0]:
        raise RuntimeError(f"bmm: batch sizes differ: {input.shape[0]} and {mat2.shape[0]}")
    if input.dtype is mat2.dtype and input.dtype.kind in "fc" and input.shape[2] == mat2.shape[1]:
        # (matmul.fwd's checks hold; below gemm.matmul's least size it returns None)
        big = xp is np and input.size * mat2.size >= gemm._MIN_OWN * input.shape[2]
        out = gemm.matmul(input, mat2) if big else None
        return xp.matmul(input, mat2) if out is None else out
    return matmul.fwd(xp, input, mat2)


bmm.vjp(save=("input", "mat2"), needed_by="cross")(lambda g, input, mat2: (g @ mat2.mT.conj(),
                                                         input.mT.conj() @ g))
bmm.meta = _matmul_meta
bmm.samples = lambda dev, dt: [Sample(make((2, 3, 4), dt), make((2, 4, 5), dt, seed=1))] \
    if dt.category >= 1 else []


@op("mv", tags=("autocast_lower_cuda",))
def mv(xp, input, vec):
    """Matrix-vector product."""
    if input.ndim != 2 or vec.ndim != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got {input.ndim}, {vec.ndim}")
    return matmul.fwd(xp, input, vec)


mv.vjp(save=("input", "vec"), needed_by="cross")(lambda g, input, vec: (g.unsqueeze(1) * vec.conj(),
                                                      input.mT.conj() @ g))
mv.meta = _matmul_meta


@op("dot", tags=("autocast_promote_cuda",))
def dot(xp, input, other):
    """Inner product of two 1-D tensors."""
    if input.ndim != 1 or other.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {input.ndim}D and {other.ndim}D "
                           "tensors")
    if input.shape != other.shape:
        raise RuntimeError(f"inconsistent tensor size, expected tensor [{input.shape[0]}] and "
                           f"src [{other.shape[0]}] to have the same number of elements, but "
                           "got different sizes")
    _check_dtypes("dot", input, other)
    if xp is np and input.size >= 1 << 16 and (nt := _C.num_threads()) > 1 and \
            (fn := _C.kernel("dot", input.dtype)) and input.flags.c_contiguous and \
            other.flags.c_contiguous:       # (factor.h: over threads, as torch's)
        fn(_C.ptr(input), _C.ptr(other), input.size, _C.ptr(out := np.empty((), input.dtype)), nt)
        return out
    return xp.asarray(xp.dot(input, other))


dot.vjp(save=("input", "other"), needed_by="cross")(
    lambda g, input, other: (g * other.conj(), g * input.conj()))
dot.meta = lambda a, b: empty((), np.result_type(a, b))
dot.samples = lambda dev, dt: [Sample(make((4,), dt), make((4,), dt, seed=1))] \
    if dt.category >= 1 else []


@op("outer", aliases=("ger",), promote="common")
def outer(xp, input, vec2):
    """Outer product of two vectors."""
    for name, v in (("self", input), ("vec2", vec2)):
        if v.ndim != 1:
            raise RuntimeError(f"outer: Expected 1-D argument {name}, but got {v.ndim}-D")
    if xp is np and (r := _C.outer(input[None], vec2[None])) is not None:
        return r[0]     # (rowops' outer: NumPy's multiply bit for bit, over threads)
    return xp.multiply.outer(input, vec2) if xp is np else input[:, None] * vec2[None, :]


outer.vjp(save=("input", "vec2"), needed_by="cross")(
    lambda g, input, vec2: (g @ vec2.conj(), g.mT @ input.conj()))
outer.samples = lambda dev, dt: [Sample(make((3,), dt), make((4,), dt, seed=1))] \
    if dt.category >= 1 else []
outer.grad_name = "MulBackward0"


@op("addmm", tags=("autocast_lower",), promote="common", inplace=True)
def addmm(xp, input, mat1, mat2, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat1 @ mat2)``."""
    _check_2d("addmm", mat1, mat2)
    out = _small_mm(xp, mat1, mat2, input, beta, alpha)
    return _scale_add(matmul.fwd(xp, mat1, mat2), input, beta, alpha) if out is None else out


def _scale_add(p, input, beta, alpha):
    # NOTE: beta == 0 ignores input entirely (nan and inf in it do not propagate), as in torch.
    if p.dtype.kind in "fc" and type(alpha) in (int, float) and type(beta) in (int, float) \
            and input.dtype == p.dtype and input.shape == p.shape[p.ndim - input.ndim:]:
        # p is the fresh product: scale and add in place, no temporaries (an input that
        # broadcasts on a size-1 dim or is larger than p takes the path below)
        if alpha != 1:
            p *= alpha
        if beta != 0:
            p += input if beta == 1 else input * beta
        return p
    out = p * alpha if alpha != 1 else p
    if beta != 0:
        out = out + (input if beta == 1 else input * beta)
    return out.astype(p.dtype, copy=False)


@addmm.vjp(save=("mat1", "mat2"), needed_by="cross")
def _(g, input, mat1, mat2, *, beta=1, alpha=1):
    ga = g if alpha == 1 else g * alpha
    return (g if beta == 1 else g * beta), ga @ mat2.mT.conj(), mat1.mT.conj() @ ga


addmm.samples = lambda dev, dt: [
    Sample(make((3, 5), dt), make((3, 4), dt, seed=1), make((4, 5), dt, seed=2)),
    Sample(make((5,), dt), make((3, 4), dt, seed=1), make((4, 5), dt, seed=2), beta=0.5,
           alpha=2)] if dt.category >= 2 else []


@op("baddbmm", tags=("autocast_lower",), promote="common", inplace=True)
def baddbmm(xp, input, batch1, batch2, *, beta=1, alpha=1):
    """``beta * input + alpha * (batch1 @ batch2)`` over a batch."""
    out = _small_mm(xp, batch1, batch2, input, beta, alpha) if batch1.ndim == 3 else None
    return _scale_add(bmm.fwd(xp, batch1, batch2), input, beta, alpha) if out is None else out


@baddbmm.vjp(save=("batch1", "batch2"), needed_by="cross")
def _(g, input, batch1, batch2, *, beta=1, alpha=1):
    ga = g if alpha == 1 else g * alpha
    return (g if beta == 1 else g * beta), ga @ batch2.mT.conj(), batch1.mT.conj() @ ga


baddbmm.samples = lambda dev, dt: [
    Sample(make((2, 3, 5), dt), make((2, 3, 4), dt, seed=1), make((2, 4, 5), dt, seed=2),
           beta=0.5, alpha=2)] if dt.category >= 2 else []


def _scaled(g, alpha):
    return g if alpha == 1 else g * alpha


@op("addbmm", tags=("autocast_lower",), promote="common", inplace=True)
def addbmm(xp, input, batch1, batch2, *, beta=1, alpha=1):
    """``beta * input + alpha * sum_b(batch1[b] @ batch2[b])``: the batch is reduced."""
    if batch1.ndim != 3 or batch2.ndim != 3:
        raise RuntimeError(f"addbmm: batch1 must be a 3D tensor, got {batch1.ndim}D and "
                           f"{batch2.ndim}D")
    if batch1.shape[0] != batch2.shape[0]:
        raise RuntimeError("batch1 and batch2 must have same number of batches, got "
                           f"{batch1.shape[0]} and {batch2.shape[0]}")
    # one GEMM over the concatenated batch: (n, b*k) @ (b*k, p) sums the products for free
    b, n, k = batch1.shape
    a2, b2 = moveaxis(xp, batch1, 0, 1).reshape(n, b * k), batch2.reshape(b * k, -1)
    out = _small_mm(xp, a2, b2, input, beta, alpha)
    return _scale_add(matmul.fwd(xp, a2, b2), input, beta, alpha) if out is None else out


@addbmm.vjp(save=("batch1", "batch2"), needed_by="cross")
def _(g, input, batch1, batch2, *, beta=1, alpha=1):
    ga = _scaled(g, alpha).unsqueeze(0)
    return _scaled(g, beta), ga @ batch2.mT.conj(), batch1.mT.conj() @ ga


addbmm.samples = lambda dev, dt: [
    Sample(make((3, 5), dt), make((2, 3, 4), dt, seed=1), make((2, 4, 5), dt, seed=2)),
    Sample(make((5,), dt), make((2, 3, 4), dt, seed=1), make((2, 4, 5), dt, seed=2),
           beta=0.5, alpha=2)] if dt.category >= 2 else []
addbmm.errors = [ErrorSample(Sample(const(2, 2), const(2, 2, 3), const(3, 3, 2)), RuntimeError,
                             "batch1 and batch2 must have same number of batches, got 2 and 3")]


@op("addmv", tags=("autocast_lower_cuda",), promote="common", inplace=True)
def addmv(xp, input, mat, vec, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat @ vec)``."""
    # (dtypes promoted: matmul.fwd's checks would cost a third of the call; a product of
    # _small_mm's that read input had the shapes below)
    out = _small_mm(xp, mat, vec, input, beta, alpha)
    if (out is None or not beta) and (mat.ndim != 2 or vec.ndim != 1 or mat.shape[1] != vec.shape[0]
                                      or input.shape not in ((), (1,), mat.shape[:1])):
        raise RuntimeError(f"size mismatch, got input ({', '.join(map(str, input.shape))}), "
                           f"mat ({'x'.join(map(str, mat.shape))}), vec "
                           f"({'x'.join(map(str, vec.shape))})")
    return out if out is not None else _scale_add(_matvec(xp, mat, vec) if mat.dtype.kind in "fc"
                                                  else matmul.fwd(xp, mat, vec), input, beta, alpha)


@addmv.vjp(save=("mat", "vec"), needed_by="cross")
def _(g, input, mat, vec, *, beta=1, alpha=1):
    ga = _scaled(g, alpha)
    return _scaled(g, beta), ember.outer(ga, vec.conj()), mat.mT.conj() @ ga


addmv.samples = lambda dev, dt: [
    Sample(make((3,), dt), make((3, 4), dt, seed=1), make((4,), dt, seed=2)),
    Sample(make((1,), dt), make((3, 4), dt, seed=1), make((4,), dt, seed=2), beta=0.5,
           alpha=2)] if dt.category >= 2 else []
addmv.errors = [ErrorSample(Sample(const(2), const(2, 3), const(4)), RuntimeError,
                            r"size mismatch, got input \(2\), mat \(2x3\), vec \(4\)")]


@op("addr", promote="common", inplace=True)
def addr(xp, input, vec1, vec2, *, beta=1, alpha=1):
    """``beta * input + alpha * outer(vec1, vec2)``."""
    if vec1.ndim != 1 or vec2.ndim != 1:
        raise RuntimeError(f"addr: Expected 1-D argument vec1, but got {vec1.ndim}-D")
    shape = vec1.shape + vec2.shape
    fn = _C.kernel("addr", input.dtype) if xp is np and type(alpha) in (int, float) and \
        type(beta) in (int, float) and vec1.dtype == vec2.dtype == input.dtype and \
        input.shape in (shape, shape[1:]) and input.flags.c_contiguous else None
    if fn is not None:      # (one pass: the product, scaled and added; NumPy's are three)
        out, v1, v2 = np.empty(shape, input.dtype), _C.contiguous(vec1), _C.contiguous(vec2)
        fn(_C.ptr(input) if beta else 0, shape[1] * (input.ndim == 2), _C.ptr(v1), _C.ptr(v2),
           _C.ptr(out), shape[0], shape[1], float(beta), float(alpha), _C.num_threads())
        return out
    return _scale_add(outer.fwd(xp, vec1, vec2), input, beta, alpha)


@addr.vjp(save=("vec1", "vec2"), needed_by="cross")
def _(g, input, vec1, vec2, *, beta=1, alpha=1):
    ga = _scaled(g, alpha)
    return _scaled(g, beta), ga @ vec2.conj(), ga.mT @ vec1.conj()


addr.samples = lambda dev, dt: [
    Sample(make((3, 4), dt), make((3,), dt, seed=1), make((4,), dt, seed=2)),
    Sample(make((4,), dt), make((3,), dt, seed=1), make((4,), dt, seed=2), beta=0.5,
           alpha=2)] if dt.category >= 2 else []


@op("vdot")
def vdot(xp, input, other):
    """``sum(conj(input) * other)`` of two 1-D tensors."""
    if xp is np and input.dtype.kind == "f" and input.ndim == 1 and other.shape == input.shape \
            and other.dtype == input.dtype and input.size < 1 << 16:
        return np.dot(input, other)     # (the common call: dot's checks passed, one thread)
    r = dot.fwd(xp, input, other)       # (its checks; of real tensors, the result)
    return xp.asarray(xp.vdot(input, other)) if input.dtype.kind == "c" else r


vdot.vjp(save=("input", "other"), needed_by="cross")(
    lambda g, input, other: (g.conj() * other, g * input))
vdot.meta = dot.meta
vdot.samples = dot.samples
vdot.errors = [ErrorSample(Sample(const(2), const(3)), RuntimeError,
                           r"inconsistent tensor size, expected tensor \[2\] and src \[3\]")]


# ---- tensordot, inner, kron -----------------------------------------------------------------

def _tensordot_axes(a, b, dims):
    """(contracted axes of a, of b) from torch's ``dims``: a count or two lists of axes."""
    if isinstance(dims, int):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        return list(range(a.ndim - dims, a.ndim)), list(range(dims))
    ca, cb = ([d] if isinstance(d, int) else list(d) for d in dims)
    if len(ca) != len(cb):
        raise RuntimeError(f"both dimension lists should have same length, got {len(ca)} "
                           f"and {len(cb)}")
    ca, cb = [d % a.ndim for d in ca], [d % b.ndim for d in cb]
    for x, y in zip(ca, cb):
        if a.shape[x] != b.shape[y]:
            raise RuntimeError(f"contracted dimensions need to match, but first has size "
                               f"{a.shape[x]} in dim {x} and second has size {b.shape[y]} in "
                               f"dim {y}")
    return ca, cb


@op("tensordot", method=False)
def tensordot(xp, a, b, dims=2):
    """Sum of products over ``dims`` (a count of trailing/leading dims, or two axis lists).

    Example:
        >>> ember.tensordot(ember.ones(2, 3, 4), ember.ones(3, 4, 5), dims=2).shape
        torch.Size([2, 5])
    """
    _check_dtypes("tensordot", a, b)
    ca, cb = _tensordot_axes(a, b, dims)
    fa = [i for i in range(a.ndim) if i not in ca]
    fb = [i for i in range(b.ndim) if i not in cb]
    n = math.prod(a.shape[i] for i in ca)
    # NOTE: contract as one (free_a, n) @ (n, free_b) GEMM, so BLAS does the work
    a2 = xp.transpose(a, fa + ca).reshape(-1, n)
    b2 = xp.transpose(b, cb + fb).reshape(n, -1)
    shape = tuple(a.shape[i] for i in fa) + tuple(b.shape[i] for i in fb)
    return matmul.fwd(xp, a2, b2).reshape(shape)


def _inverse(perm):
    return [perm.index(i) for i in range(len(perm))]


@tensordot.vjp(save=("a", "b"), needed_by="cross")
def _(g, a, b, dims=2):
    ca, cb = _tensordot_axes(a, b, dims)
    fa = [i for i in range(a.dim()) if i not in ca]
    fb = [i for i in range(b.dim()) if i not in cb]
    ga = gb = None
    if a.requires_grad:
        # g (fa, fb) . conj(b) over fb leaves b's contracted axes in ascending order
        order = sorted(cb)
        ga = ember.tensordot(g, b.conj(), ([len(fa) + i for i in range(len(fb))], fb))
        ga = ga.permute(_inverse(fa + [ca[cb.index(c)] for c in order]))
    if b.requires_grad:
        order = sorted(ca)
        gb = ember.tensordot(a.conj(), g, (fa, list(range(len(fa)))))
        gb = gb.permute(_inverse([cb[ca.index(c)] for c in order] + fb))
    return ga, gb


tensordot.meta = lambda a, b, dims=2: empty(
    tuple(s for i, s in enumerate(a.shape) if i not in _tensordot_axes(a, b, dims)[0]) +
    tuple(s for i, s in enumerate(b.shape) if i not in _tensordot_axes(a, b, dims)[1]),
    np.result_type(a, b))
tensordot.samples = lambda dev, dt: [
    Sample(make((2, 3, 4), dt), make((3, 4, 5), dt, seed=1)),
    Sample(make((2, 3, 4), dt), make((4, 2), dt, seed=1), dims=([0, 2], [1, 0])),
    Sample(make((3, 4), dt), make((2, 5), dt, seed=1), dims=0),
    Sample(make((4, 3), dt, noncontig=True), make((3, 4), dt, seed=1), 1)] \
    if dt.category >= 1 else []
tensordot.errors = [ErrorSample(Sample(const(2, 3), const(2, 4), dims=([1], [1])), RuntimeError,
                                "contracted dimensions need to match, but first has size 3 in "
                                "dim 1 and second has size 4 in dim 1")]
tensordot.grad_name = "ViewBackward0"


@op("inner")
def inner(xp, input, other):
    """Sum of products over the last dim of both (a product when one is a scalar)."""
    if input.ndim == 0 or other.ndim == 0:
        return xp.multiply(input, other)
    if input.shape[-1] != other.shape[-1]:
        raise RuntimeError("inner() the last dimension must match on both input tensors but "
                           f"got shapes {list(input.shape)} and {list(other.shape)}")
    _check_dtypes("tensordot", input, other)   # (one GEMM: tensordot's axis lists cost 2-3x)
    n, sa, sb = input.shape[-1], input.shape[:-1], other.shape[:-1]
    return matmul.fwd(xp, input.reshape(math.prod(sa), n), other.reshape(math.prod(sb), n).T) \
        .reshape(sa + sb)


@inner.vjp(save=("input", "other"), needed_by="cross")
def _(g, input, other):
    if input.dim() == 0 or other.dim() == 0:
        return g * other.conj(), g * input.conj()
    return tensordot.vjp_fn(g, input, other, ([-1], [-1]))


inner.meta = lambda a, b: empty(a.shape[:-1] + b.shape[:-1] if a.ndim and b.ndim else
                                np.broadcast_shapes(a.shape, b.shape), np.result_type(a, b))
inner.samples = lambda dev, dt: [
    Sample(make((2, 4), dt), make((3, 4), dt, seed=1)),
    Sample(make((4,), dt), make((2, 3, 4), dt, seed=1)),
    Sample(make((), dt), make((2, 3), dt, seed=1))] if dt.category >= 1 else []
inner.errors = [ErrorSample(Sample(const(2, 3), const(2, 4)), RuntimeError,
                            r"last dimension must match on both input tensors but got shapes "
                            r"\[2, 3\] and \[2, 4\]")]
inner.grad_name_of = lambda input, other: \
    "MulBackward0" if input.dim() == 0 or other.dim() == 0 else "ViewBackward0"


@op("kron", promote="common")
def kron(xp, input, other):
    """Kronecker product: block ``(i, j, ...)`` is ``input[i, j, ...] * other``."""
    sa, sb, shape, ia, ib = _kron_shapes(input.shape, other.shape)
    a, b = input.reshape(ia), other.reshape(ib)
    n, q = (sa[-1], sb[-1]) if sa else (0, 0)
    big = sa and input.size * other.size >= 1 << 15
    if big and 1 < n <= input.size // 4 and q <= min(63, other.size // 4):
        if xp is np and input.ndim == other.ndim == 2 and input.dtype == other.dtype and (
                fn := _C.kernel("kron_rows", input.dtype)) is not None:   # (over threads)
            a, b = np.ascontiguousarray(input), np.ascontiguousarray(other)
            fn(_C.ptr(a), _C.ptr(b), _C.ptr(out := np.empty(shape, a.dtype)), *a.shape,
               *b.shape, _C.num_threads())
            return out
        # the last pair (n, 1) x (1, q) merged into a run of n * q (input's repeated, other's
        # tiled: copies of a quarter of the product's size at most), so the product's inner
        # loop spans an output row, not other's short last dim (kron's (14, 21) x (21, 14),
        # runs of 14: 114 -> 46 us, the outer kernel below 68)
        a = xp.broadcast_to(a, a.shape[:-1] + (q,)).reshape(a.shape[:-2] + (n * q,))
        b = xp.broadcast_to(b, b.shape[:-2] + (n, q)).reshape(b.shape[:-2] + (n * q,))
    elif xp is np and big and input.dtype == other.dtype:
        # the interleaved leading dims are a batch of outer products of the last dims' rows:
        # the outer kernel, not NumPy's loop over the last dim (a call per row of other's)
        lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        rows = (np.ascontiguousarray(np.broadcast_to(r, lead + r.shape[-1:])).reshape(
            -1, r.shape[-1]) for r in (a[..., 0], b[..., 0, :]))
        if (out := _C.outer(*rows)) is not None:
            return out.reshape(shape)
    # (one broadcast product of interleaved dims: np.kron's Python costs several times more)
    return (a * b).reshape(shape)


@functools.lru_cache(maxsize=256)
def _kron_shapes(ta, tb):
    """The shapes ``ta``, ``tb`` padded to one length, the product's shape, and the
    interleaved shapes the factors are viewed as ((a0, 1, a1, 1...), (1, b0, 1, b1...)). Kept
    per pair of shapes: working them out was half a small call."""
    nd = max(len(ta), len(tb))
    sa, sb = (1,) * (nd - len(ta)) + tuple(ta), (1,) * (nd - len(tb)) + tuple(tb)
    return sa, sb, tuple(map(operator.mul, sa, sb)), tuple(v for s in sa for v in (s, 1)), \
        tuple(v for s in sb for v in (1, s))


kron.meta = lambda input, other: empty(_kron_shapes(tuple(input.shape), tuple(other.shape))[2],
                                       np.result_type(input, other))


@kron.vjp(save=("input", "other"), needed_by="cross")
def _(g, input, other):
    # g as interleaved (a0, b0, a1, b1, ...) dims, permuted into an (input's elements, other's
    # elements) matrix G: each factor's grad is one matrix-vector product with the other
    # (a multiply and a strided sum per factor took 5x as long)
    nd = max(input.dim(), other.dim())
    sa = (1,) * (nd - input.dim()) + tuple(input.shape)
    sb = (1,) * (nd - other.dim()) + tuple(other.shape)
    G = g.reshape([s for pair in zip(sa, sb) for s in pair]).permute(
        *range(0, 2 * nd, 2), *range(1, 2 * nd, 2)).reshape(input.numel(), other.numel())
    ga = (G @ other.conj().reshape(-1)).reshape(input.shape) if input.requires_grad else None
    gb = (input.conj().reshape(-1) @ G).reshape(other.shape) if other.requires_grad else None
    return ga, gb


kron.samples = lambda dev, dt: [
    Sample(make((2, 3), dt), make((3, 2), dt, seed=1)),
    Sample(make((2,), dt), make((2, 3, 2), dt, seed=1))] if dt.category >= 1 else []
kron.grad_name = "UnsafeViewBackward0"


# ---- cdist, cross -----------------------------------------------------------------------------

def _check_cdist(x1, x2, p):
    if (bad := x1 if x1.dtype.kind not in "fcV" else x2).dtype.kind not in "fcV":
        raise RuntimeError("cdist only supports floating-point dtypes, X1 got: "
                           f"{type_name(bad.dtype)}")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError("X1 and X2 must have the same number of columns. X1: "
                           f"{x1.shape[-1]} X2: {x2.shape[-1]}")
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")


def _cdist_mm(x1, x2, compute_mode):
    """Whether torch computes these Euclidean distances by a matrix product."""
    return compute_mode == "use_mm_for_euclid_dist" or compute_mode in (
        None, "use_mm_for_euclid_dist_if_necessary") and (x1.shape[-2] > 25 or x2.shape[-2] > 25)


@op("cdist", method=False, promote="common")
def cdist(xp, x1, x2, p=2.0, compute_mode=None):
    """p-norm distances between the rows of ``x1`` (..., P, M) and ``x2`` (..., R, M)."""
    _check_cdist(x1, x2, p)
    if p == 2 and x1.dtype.kind != "c" and _cdist_mm(x1, x2, compute_mode):
        # NOTE: as torch's _euclidean_dist: |a|^2 + |b|^2 - 2 a.b, one matrix product, clamped
        # at 0 (its cancellation for near points is torch's too); half precision in float32
        dt, (x1, x2) = x1.dtype, (a.astype(np.float32) if a.dtype.itemsize == 2 else a
                                  for a in (x1, x2))
        sq = (x1 * x1).sum(-1)[..., :, None] + (x2 * x2).sum(-1)[..., None, :]
        return xp.sqrt(xp.maximum(sq - 2 * xp.matmul(x1, xp.swapaxes(x2, -1, -2)), 0)).astype(dt)
    if x1.dtype.itemsize == 2:
        raise RuntimeError(f"\"cdist\" not implemented for '{type_name(x1.dtype)}'")
    if p == 2 and xp is np and x1.ndim == x2.ndim >= 2 and x1.shape[:-2] == x2.shape[:-2] and \
            (fn := _C.kernel("cdist2", x1.dtype)):      # (factor.h: float32, float64)
        a, b = _C.contiguous(x1), _C.contiguous(x2)
        out = np.empty(a.shape[:-1] + b.shape[-2:-1], a.dtype)
        fn(_C.ptr(a), _C.ptr(b), _C.ptr(out), math.prod(a.shape[:-1]), a.shape[-2], b.shape[-2],
           a.shape[-1], _C.num_threads())
        return out
    if p == 2:
        d = x1[..., :, None, :] - x2[..., None, :, :]
        return xp.sqrt(xp.sum(d * d, axis=-1))
    d = xp.abs(x1[..., :, None, :] - x2[..., None, :, :])
    if p == math.inf:
        return xp.max(d, axis=-1) if d.shape[-1] else xp.zeros(d.shape[:-1], d.dtype)
    if p == 0:
        return xp.sum(d != 0, axis=-1).astype(d.dtype)
    return xp.sum(d if p == 1 else d ** p, axis=-1) ** (1.0 / p)


@cdist.vjp(save=("x1", "x2", "result"))
def _(g, x1, x2, p=2.0, compute_mode=None, result=None):
    if p == 2:      # matrix products: the (P, R, M) differences are never formed
        w = ember.where(z := result == 0, 0.0, g / ember.where(z, 1.0, result))
        return (w.sum(-1, keepdim=True) * x1 - w @ x2,
                (wt := w.mT).sum(-1, keepdim=True) * x2 - wt @ x1)
    d = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    r = result.unsqueeze(-1)
    if p == 0:
        dd = d * 0
    elif p == 1:
        dd = d.sign()
    elif p == math.inf:
        dd = d.sign() * (d.abs() == r)
    else:       # d/dd ||d||_p = sign(d) |d|^(p-1) / ||d||^(p-1), 0 where the distance is 0
        dd = ember.where(r == 0, 0.0, d * d.abs() ** (p - 2) / r ** (p - 1))
    gd = g.unsqueeze(-1) * dd
    return gd.sum(-2), -gd.sum(-3)


cdist.meta = lambda x1, x2, p=2.0, compute_mode=None: empty(
    np.broadcast_shapes(x1.shape[:-2], x2.shape[:-2]) + (x1.shape[-2], x2.shape[-2]),
    x1.dtype)
cdist.kinks = (0.0,)
cdist.samples = lambda dev, dt: [
    Sample(make((3, 4), dt), make((5, 4), dt, seed=1), p)
    for p in (2.0, 1.0, 0.0, math.inf, 3.0, 0.5)] + [
    Sample(make((2, 3, 4), dt), make((1, 2, 4), dt, seed=1)),
    Sample(make((2, 30, 4), dt), make((5, 4), dt, seed=1)),
    Sample(make((3, 4), dt), make((5, 4), dt, seed=1), compute_mode="use_mm_for_euclid_dist")] \
    if dt.category == 2 else []
# (torch's matrix-product path is a composite that ends in a view)
cdist.grad_name_of = lambda x1, x2, p=2.0, compute_mode=None: "ViewBackward0" if p == 2 and \
    _cdist_mm(x1, x2, compute_mode) else "CdistBackward0"
cdist.errors = [
    ErrorSample(Sample(const(2, 3), const(2, 4)), RuntimeError,
                "X1 and X2 must have the same number of columns. X1: 3 X2: 4"),
    ErrorSample(Sample(const(2, 3), const(2, 3), -1.0), RuntimeError,
                "cdist only supports non-negative p values"),
    dtype_error("cdist", (2, 3), (2, 3), exc=RuntimeError,
                match="cdist only supports floating-point dtypes, X1 got: Long")]


def _cross_dim(a, b, dim):
    if a.ndim != b.ndim:
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
    if dim is None:
        # NOTE: torch.cross without dim takes the first dim of size 3 (deprecated in torch)
        dim = next((i for i, s in enumerate(np.broadcast_shapes(a.shape, b.shape)) if s == 3),
                   None)
        if dim is None:
            raise RuntimeError("no dimension of size 3 in input")
        return dim
    if a.shape[dim] != 3 or b.shape[dim] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got "
                           f"{a.shape[dim]} and {b.shape[dim]}")
    return dim


@op("cross", promote="common")
def cross(xp, input, other, dim=None):
    """Cross product of 3-vectors along ``dim`` (default: the first dim of size 3)."""
    dim = _cross_dim(input, other, dim) % input.ndim
    fn = _C.kernel("cross3", input.dtype) if xp is np and input.shape == other.shape and \
        input.dtype == other.dtype and input.flags.c_contiguous and \
        other.flags.c_contiguous else None
    if fn is not None:      # (one pass: the reference's is seven)
        out = np.empty(input.shape, input.dtype)
        fn(_C.ptr(input), _C.ptr(other), _C.ptr(out), math.prod(input.shape[:dim]),
           math.prod(input.shape[dim + 1:]), _C.num_threads())
        return out
    # (as np.cross computes it, without its moveaxis and broadcast_arrays: 8x less overhead)
    # (the arrays' own take: np.take's dispatch cost more than a small call's arithmetic)
    r1, r2 = _CROSS if xp is np else (xp.asarray(_CROSS[0]), xp.asarray(_CROSS[1]))
    return input.take(r1, dim) * other.take(r2, dim) - input.take(r2, dim) * other.take(r1, dim)


_CROSS = np.array([1, 2, 0]), np.array([2, 0, 1])


@cross.vjp(save=("input", "other"), needed_by="cross")
def _(g, input, other, dim=None):
    dim = _cross_dim(input, other, dim)
    return ember.cross(other.conj(), g, dim), ember.cross(g, input.conj(), dim)


cross.samples = lambda dev, dt: [
    Sample(make((4, 3), dt), make((4, 3), dt, seed=1), 1),
    Sample(make((3, 2), dt), make((3, 1), dt, seed=1)),
    Sample(make((2, 3), dt), make((1, 3), dt, seed=1), dim=-1)] if dt.category >= 1 else []
cross.errors = [ErrorSample(Sample(const(2, 4), const(2, 4), -1), RuntimeError,
                            "inputs dimension -1 must have length 3. Got 4 and 4"),
                ErrorSample(Sample(const(2, 4), const(2, 4)), RuntimeError,
                            "no dimension of size 3 in input"),
                ErrorSample(Sample(const(2, 3), const(3), -1), RuntimeError,
                            "inputs must have the same number of dimensions")]
cross.grad_name = "LinalgCrossBackward0"


# ---- forward mode (tangents.py) ----------------------------------------------------------


def _cdist_jvp(a, t, out):
    p, u = a["p"], a["x1"].unsqueeze(-2) - a["x2"].unsqueeze(-3)
    tu = t["x1"].unsqueeze(-2) - t["x2"].unsqueeze(-3)
    if p == 0:
        return ember.zeros_like(out)
    if p == math.inf:
        return (u.sign() * tu).gather(-1, u.abs().argmax(-1, keepdim=True)).squeeze(-1)
    nz = u != 0
    w = ember.where(nz, u.abs().where(nz, 1) ** (p - 1) * u.sign(), 0)
    return ember.where(out != 0, (w * tu).sum(-1) / out.where(out != 0, 1) ** (p - 1), 0)


for _d in (bmm, dot, matmul, mm, mv, outer, inner, kron, tensordot, vdot, cross):
    _d.jvp = PRODUCT
for _d in (addmm, addmv, baddbmm, addbmm, addr):
    _d.jvp = multilinear("input")
cdist.jvp = decomposed(_cdist_jvp)
