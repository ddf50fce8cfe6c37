"""Matrix products: matmul, mm, bmm, mv, dot, outer, addmm, baddbmm."""
import numpy as np

import ember

from .meta import empty
from .registry import op
from .samples import ErrorSample, Sample, make


_NO_BLAS = (ember.bfloat16.np, ember.float8_e4m3fn.np, ember.float8_e5m2.np)


def _check_dtypes(name, a, b):
    if a.dtype == np.bool_:
        raise NotImplementedError(f"\"{name}\" not implemented for 'Bool'")
    if a.dtype != b.dtype:
        raise RuntimeError(f"{name}: expected m1 and m2 to have the same dtype, but got: "
                           f"{a.dtype} != {b.dtype}")


@op("matmul", tags=("autocast_lower",))
def matmul(xp, input, other):
    """Matrix product with NumPy/torch broadcasting over batch dimensions."""
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
    if input.dtype in _NO_BLAS:
        # NOTE: bf16/fp8 have no BLAS kernel: multiply in float32 and round once, as torch does
        return xp.matmul(input.astype(np.float32), other.astype(np.float32)).astype(input.dtype)
    return xp.matmul(input, other)


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
    return xp.asarray(xp.dot(input, other))


dot.vjp(save=("input", "other"), needed_by="cross")(
    lambda g, input, other: (g * other.conj(), g * input.conj()))
dot.meta = lambda a, b: empty((), np.result_type(a, b))
dot.samples = lambda dev, dt: [Sample(make((4,), dt), make((4,), dt, seed=1))] \
    if dt.category >= 1 else []


@op("outer", aliases=("ger",), promote="common")
def outer(xp, input, vec2):
    """Outer product of two vectors."""
    return xp.multiply.outer(input, vec2) if xp is np else input[:, None] * vec2[None, :]


outer.vjp(save=("input", "vec2"), needed_by="cross")(
    lambda g, input, vec2: (g @ vec2.conj(), g.mT @ input.conj()))
outer.samples = lambda dev, dt: [Sample(make((3,), dt), make((4,), dt, seed=1))] \
    if dt.category >= 1 else []


@op("addmm", tags=("autocast_lower",), promote="common", inplace=True)
def addmm(xp, input, mat1, mat2, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat1 @ mat2)``."""
    _check_2d("addmm", mat1, mat2)
    return _scale_add(matmul.fwd(xp, mat1, mat2), input, beta, alpha)


def _scale_add(p, input, beta, alpha):
    # NOTE: beta == 0 ignores input entirely (nan and inf in it do not propagate), as in torch.
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
    return _scale_add(bmm.fwd(xp, batch1, batch2), input, beta, alpha)


@baddbmm.vjp(save=("batch1", "batch2"), needed_by="cross")
def _(g, input, batch1, batch2, *, beta=1, alpha=1):
    ga = g if alpha == 1 else g * alpha
    return (g if beta == 1 else g * beta), ga @ batch2.mT.conj(), batch1.mT.conj() @ ga


baddbmm.samples = lambda dev, dt: [
    Sample(make((2, 3, 5), dt), make((2, 3, 4), dt, seed=1), make((2, 4, 5), dt, seed=2),
           beta=0.5, alpha=2)] if dt.category >= 2 else []
