"""Neural-network ops with fused forwards and hand-written backwards: linear, softmax,
log_softmax, nll_loss. Composite layers live in ember/nn/functional.py."""
import math

import numpy as np

import ember

from .._C import kernels as _C
from . import gemm
from .indexing import _capturing, check_range
from .._tensor import Tensor
from ..autograd.grad_mode import state as _grad_state
from ..autograd.graph import needs_input_grad
from .linalg import matmul, matmul_node
from .pointwise import fused_grad
from .meta import broadcast_meta, empty, same_meta
from .pointwise_math import threshold_backward
from .tangents import (LINEAR, affine, decomposed, fallback_unless, linear_with, loss, multilinear,
                       named, normalized)
from .registry import op
from .samples import ErrorSample, Sample, const, make

_BLAS_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_F32 = _BLAS_DTYPES[0]


@op("linear", tags=("autocast_lower",), method=False, function=False)
def linear(xp, input, weight, bias=None):
    """``input @ weight.T + bias`` (weight is (out_features, in_features))."""
    if input.shape[-1:] != weight.shape[-1:]:
        a = input.reshape(-1, input.shape[-1]).shape if input.ndim else (1, 1)
        raise RuntimeError(f"linear: mat1 and mat2 shapes cannot be multiplied ({a[0]}x{a[1]} "
                           f"and {weight.shape[-1]}x{weight.shape[0]})")
    if bias is not None and xp is np and input.ndim >= 2 and weight.ndim == 2 and \
            input.dtype is _F32 and weight.dtype is _F32:
        # the bias added by ember's GEMM as it writes each tile of the output, not by a
        # second pass over it
        out = gemm.matmul2d(_rows(input), weight.T, bias)
        if out is not None:
            return out.reshape(input.shape[:-1] + (-1,))
    if input.ndim > 2 and weight.ndim == 2:
        # one (N*L, in) @ (in, out) GEMM, not matmul's slower loop of N small ones; free for a
        # contiguous input
        out = matmul.fwd(xp, _rows(input), weight.T).reshape(input.shape[:-1] + (-1,))
    else:
        out = matmul.fwd(xp, input, weight.T)
    if bias is not None and not _C.add_bias(out, bias):
        out += bias.astype(out.dtype, copy=False)
    return out


def _rows(a):
    """``a`` (array or Tensor, ndim >= 2) as a matrix of its last-dim rows."""
    return a.reshape(-1, a.shape[-1])


@linear.vjp(save=("input", "weight"))
def _(g, input, weight, bias=None):
    # an input that needs no gradient (the data batch in front of the first layer) gets none:
    # its (batch, out) @ (out, in) product would be a third of that layer's backward
    grads = _linear_grads_np(g, input, weight, bias)
    if grads is not None:
        return grads
    gi = gw = gb = None
    if weight.dim() == 1:           # a dot product per row: g is input.shape[:-1]
        if needs_input_grad(0):
            gi = g.unsqueeze(-1) * weight.conj()
        if needs_input_grad(1):
            gw = _rows(g.unsqueeze(-1) * input.conj()).sum(0)
        return gi, gw, (g.sum() if bias is not None else None)
    flat = g.dim() > 2                              # one GEMM over all rows, as forward
    g2 = _rows(g) if flat or g.dim() == 1 else g
    if needs_input_grad(0):
        gi = (g2 @ weight.conj()).reshape(input.shape) if flat else g @ weight.conj()
    if needs_input_grad(1):
        gw = g2.mT @ (_rows(input) if input.dim() != 2 else input).conj()
    if bias is not None and needs_input_grad(2):
        gb = g2.sum(0)
    return gi, gw, gb


def _linear_grads_np(g, input, weight, bias):
    """The same gradients of a float matrix layer in NumPy when nothing differentiates them
    (``kernel_grads``): the three products and the bias sum without a dispatch each."""
    arrays = kernel_grads(g, input, weight)
    if arrays is None or arrays[2].ndim != 2 or arrays[0].dtype not in _BLAS_DTYPES:
        return None
    g, x, w = arrays
    g2 = g if g.ndim == 2 else g.reshape(-1, w.shape[0])
    gi = gw = gb = None
    if needs_input_grad(0):
        gi = Tensor._wrap(matmul.fwd(np, g2, w).reshape(x.shape))
    if needs_input_grad(1):
        gw = Tensor._wrap(matmul.fwd(np, g2.T, x if x.ndim == 2 else x.reshape(-1, x.shape[-1])))
    if bias is not None and needs_input_grad(2):
        gb = _C.sum_rows(g2)
        gb = Tensor._wrap(np.add.reduce(g2, 0) if gb is None else gb)
    return gi, gw, gb


linear.meta = lambda x, w, b=None: empty(x.shape[:-1] + w.shape[:-1], np.result_type(x, w))
linear.samples = lambda dev, dt: [
    Sample(make((3, 4), dt), make((5, 4), dt, seed=1), make((5,), dt, seed=2)),
    Sample(make((2, 3, 4), dt), make((5, 4), dt, seed=1)),
    Sample(make((2, 3, 4), dt, noncontig=True), make((5, 4), dt, seed=1),
           make((5,), dt, seed=2)),
    Sample(make((2, 3, 4), dt), make((4,), dt, seed=1), make((), dt, seed=2)),
    Sample(make((4,), dt), make((5, 4), dt, seed=1), make((5,), dt, seed=2))] \
    if dt.category >= 2 else []
linear.torch_fn = "nn.functional.linear"


def _linear_node(input, weight, bias=None):
    """torch's node of linear: addmm for a 2-d input with bias, addmm's view for a 1-d or
    contiguous 3-d+ one, else matmul's node or the bias's add."""
    nd, wd = input._data.ndim, weight._data.ndim
    if bias is None:
        return matmul_node(nd, wd)
    if nd == 2 and wd == 2:
        return "AddmmBackward0"
    flat = nd == 1 or nd >= 3 and input.is_contiguous()
    return "ViewBackward0" if flat and wd == 2 and bias._data.ndim == 1 else "AddBackward0"


linear.grad_name_of = _linear_node


@op("embedding", method=False, function=False)
def embedding(xp, weight, indices, padding_idx=-1):
    """The rows of ``weight`` at the integer array ``indices``: ``F.embedding``'s common call
    (a ``padding_idx`` >= 0 row gets no gradient; max_norm, frequency scaling and sparse
    gradients build on indexing in nn/_embedding_functional.py). ``take`` copies whole rows,
    faster than the general ``weight[indices]``. On a GPU the backward is ember's fused
    scatter kernel (``ember/cuda/_kernels.py``)."""
    if weight.ndim != 2:
        raise RuntimeError("'weight' must be 2-D")
    check_embedding_range(indices, weight.shape[0])
    return weight.take(indices, axis=0)


def check_embedding_range(indices, n):
    """IndexError for an index of an embedding table of ``n`` rows outside ``[0, n)``.

    NOTE: torch rejects negative indices here, where ``t[idx]`` would wrap them around."""
    check_range(indices, n, lambda bad: IndexError(f"embedding: expected indices in [0, {n}), "
                                                   f"got {bad}"))


@embedding.vjp(save=("indices",))
def _(g, weight, indices, padding_idx=-1):
    from .shape import _index_embed
    if type(g._data) is not np.ndarray:
        from ..cuda import _kernels as cuda_kernels
        gw = cuda_kernels.embedding_backward(g, indices, weight.shape[0], padding_idx)
        if gw is not None:
            return gw.reshape(weight.shape), None
    if padding_idx >= 0:
        g = g.masked_fill((indices == padding_idx).unsqueeze(-1), 0)
    # (the index as an array, as getitem's backward passes it: _index_embed's own backward
    # indexes with it, and would see a tensor argument as metadata only)
    return _index_embed(g, tuple(weight.shape), indices._data, True), None


embedding.meta = lambda w, i, padding_idx=-1: empty(i.shape + w.shape[1:], w.dtype)
embedding.samples = lambda dev, dt: [
    Sample(make((5, 3), dt), np.array([[0, 4, 4], [2, 0, 1]])),
    Sample(make((4, 3), dt), np.array(3)),
    # (padding_idx's zero gradient is a convention, not the derivative: no finite differences)
    Sample(make((5, 3), dt), np.array([[0, 4, 4], [2, 0, 1]]), 4).at_kink(),
    Sample(make((5, 3), dt), np.zeros((0, 2), np.int64))] if dt.category >= 2 else []
embedding.errors = [
    ErrorSample(Sample(const(4, 2, 3), np.array([0])), RuntimeError, "'weight' must be 2-D"),
    ErrorSample(Sample(const(5, 3), np.array([0, 5])), IndexError, "index out of range|indices"),
    ErrorSample(Sample(const(5, 3), np.array([-1])), IndexError, "index out of range|indices")]
embedding.torch_fn = "embedding"


def _softmax_dtype(x, dtype):
    if dtype is not None:
        return dtype.np
    if x.dtype.kind in "biu":
        raise RuntimeError("softmax: expected a floating point input, got an integer tensor")
    return x.dtype


def kernel_grads(*tensors):
    """The arrays of ``tensors`` when a backward may run a C kernel on them instead of ember
    ops: grad mode is off (no ``create_graph``, so nothing differentiates the result) and all
    are NumPy arrays of one dtype; else None."""
    if _grad_state.grad_enabled:
        return None
    try:
        arrays = [t._data for t in tensors]
    except RuntimeError:        # a BatchedTensor (vmap of a vjp): the ember ops batch it
        return None
    if any(type(a) is not np.ndarray or a.dtype != arrays[0].dtype for a in arrays):
        return None
    return arrays


def _softmax_kernel(xp, a, b, dim, log):
    """softmax (log=0) or log_softmax (1) along ``dim`` by the C kernel: forward of ``a``, or
    with ``b`` the result, the backward of gradient ``a``. Tensors in, a Tensor out (backward);
    arrays in, an array out (forward); None when no kernel applies. On a GPU, ember's fused
    CUDA kernel (``ember/cuda/_kernels.py``)."""
    try:
        data = a._data if isinstance(a, Tensor) else a
    except RuntimeError:        # a BatchedTensor (vmap of a vjp): the ember ops batch it
        return None
    if type(data) is not np.ndarray:
        from ..cuda import _kernels as cuda_kernels
        return cuda_kernels.softmax(a, b, dim, log)
    wrap = isinstance(a, Tensor)
    if wrap:
        arrays = kernel_grads(a, b)
        if arrays is None:
            return None
        a, b = arrays
    fn = _C.kernel("softmax", a.dtype) if xp is np and a.size else None
    if fn is None:
        return None
    a, b = _C.contiguous(a), None if b is None else _C.contiguous(b)
    dim %= a.ndim
    d = a.shape[dim]
    outer = math.prod(a.shape[:dim])
    out = np.empty(a.shape, a.dtype)
    fn(_C.ptr(a), _C.ptr(b), _C.ptr(out), outer, d, a.size // (outer * d), log,
       b is not None, _C.num_threads())
    return Tensor._wrap(out) if wrap else out


@op("softmax", tags=("autocast_fp32_cuda",))
def softmax(xp, input, dim, dtype=None):
    """``exp(x) / sum(exp(x))`` along ``dim``, computed stably."""
    x = input.astype(_softmax_dtype(input, dtype), copy=False)
    if x.ndim == 0:
        return xp.ones_like(x)
    y = _softmax_kernel(xp, x, None, dim, 0)
    if y is not None:
        return y
    e = xp.exp(x - x.max(axis=dim, keepdims=True))
    return e / e.sum(axis=dim, keepdims=True)


@softmax.vjp(save=("result",))
def _(g, input, dim, dtype=None, result=None):
    if result.dim() == 0:
        return g * 0
    gx = _softmax_kernel(np, g, result, dim, 0)
    return gx if gx is not None else result * (g - (g * result).sum(dim, keepdim=True))


softmax.meta = lambda x, dim, dtype=None: empty(x.shape, _softmax_dtype(x, dtype))
softmax.samples = lambda dev, dt: [Sample(make((3, 4), dt), 1), Sample(make((3, 4), dt), 0),
                                   Sample(make((2, 3, 4), dt), -1)] if dt.category == 2 else []


@op("log_softmax", tags=("autocast_fp32_cuda",))
def log_softmax(xp, input, dim, dtype=None):
    """``log(softmax(x))`` along ``dim``, computed stably."""
    x = input.astype(_softmax_dtype(input, dtype), copy=False)
    if x.ndim == 0:
        return xp.zeros_like(x)
    y = _softmax_kernel(xp, x, None, dim, 1)
    if y is not None:
        return y
    s = x - x.max(axis=dim, keepdims=True)
    return s - xp.log(xp.exp(s).sum(axis=dim, keepdims=True))


@log_softmax.vjp(save=("result",))
def _(g, input, dim, dtype=None, result=None):
    if result.dim() == 0:
        return g * 0
    gx = _softmax_kernel(np, g, result, dim, 1)
    return gx if gx is not None else g - result.exp() * g.sum(dim, keepdim=True)


log_softmax.meta = softmax.meta
log_softmax.samples = softmax.samples


@op("nll_loss", tags=("autocast_fp32",), method=False, function=False)
def nll_loss(xp, input, target, weight=None, ignore_index=-100, reduction="mean"):
    """Negative log-likelihood of ``target`` classes under log-probabilities ``input``
    ((N, C) or (N, C, d1, ...), or (C,) with a 0-dim target)."""
    if target.dtype.kind not in "iu":
        raise RuntimeError(f"nll_loss: expected target of integer dtype, got {target.dtype}")
    x = input if input.ndim > 1 else input[None]
    t = target if input.ndim > 1 else target[None]
    if t.ndim == 0 or x.shape[0] != t.shape[0]:
        raise ValueError(f"Expected input batch_size ({x.shape[0]}) to match target batch_size "
                         f"({t.shape[0] if t.ndim else 1}).")
    if x.shape[:1] + x.shape[2:] != t.shape:
        raise RuntimeError(f"Expected target size {list(x.shape[:1] + x.shape[2:])}, got "
                           f"{list(t.shape)}")
    c = x.shape[1]
    if (r := _nll_kernel(xp, x, t, weight, ignore_index)) is not None:
        n = t.size
        return r[:n].reshape(target.shape) if reduction == "none" else r[n] if \
            reduction == "sum" else r[n] / r[n + 1]
    valid, safe, w = _nll_weights(xp, t, weight, ignore_index, x.dtype)
    # (one comparison: a negative target is a huge unsigned one)
    if not _capturing(t) and (safe.astype(xp.uint64) >= c).any() and valid.any():
        lo, hi = safe.min(), safe.max()
        raise IndexError(f"Target {int(hi if hi >= c else lo)} is out of bounds.")
    # (2-D: a fancy index; take_along_axis costs ~15 us of Python per call)
    picked = x[xp.arange(x.shape[0]), safe] if x.ndim == 2 else \
        xp.take_along_axis(x, safe[:, None], axis=1)[:, 0]
    losses = -picked * w
    if reduction == "none":
        return losses if input.ndim > 1 else losses[0]
    return losses.sum() if reduction == "sum" else losses.sum() / w.sum(dtype=x.dtype)


def _nll_kernel(xp, x, t, weight, ignore_index):
    """rowops.h's nll of (N, C, d...) ``x``: the N d losses, then their sum and the weights'
    (None where it does not apply or a target is out of range: the reference raises)."""
    fn = _C.kernel("nll", x.dtype) if xp is np and type(x) is np.ndarray and x.size and \
        t.dtype == np.int64 and (weight is None or weight.dtype == x.dtype) else None
    if fn is None:
        return None
    x, t, w = _C.contiguous(x), _C.contiguous(t), weight if weight is None else \
        _C.contiguous(weight)
    out = np.empty(t.size + 2, x.dtype)
    ok = fn(_C.ptr(x), _C.ptr(t), _C.ptr(w), _C.ptr(out), x.shape[0], x.shape[1],
            x.size // max(1, x.shape[0] * x.shape[1]), ignore_index) == 0
    return out if ok else None


def _nll_weights(xp, t, weight, ignore_index, dtype):
    """nll_loss's (valid targets, targets with the ignored ones 0, each target's weight: 0
    where ignored, bool without ``weight``) as ``xp`` arrays."""
    valid = t != ignore_index
    safe = xp.where(valid, t, 0)
    return valid, safe, valid if weight is None else (weight[safe] * valid).astype(dtype)


def _nll_grad_arrays(g, target, weight, in_shape, x_shape, ignore_index, reduction):
    """nll_loss's input gradient in NumPy where a kernel may run (no ``create_graph``: see
    kernel_grads), else None: the ember ops below cost ~10 small dispatches."""
    arrays = kernel_grads(g, *(() if weight is None else (weight,)))
    try:
        t = arrays and target._data.reshape(x_shape[:1] + x_shape[2:])
    except RuntimeError:        # a BatchedTensor (vmap of a vjp)
        return None
    if not arrays or type(t) is not np.ndarray:
        return None
    g, dt = arrays[0], arrays[0].dtype
    valid, safe, w = _nll_weights(np, t, None if weight is None else arrays[1], ignore_index, dt)
    w = w.astype(dt, copy=False)
    if reduction == "none":
        coef = -w * g.reshape(t.shape)
    elif reduction == "sum":
        coef = -w * g
    else:       # (all ignored: 0 / 0, masked)
        coef = np.where(valid, -w * g / w.sum(), 0)
    gx = np.zeros(in_shape, dt)     # (owning its memory, .grad takes it without a copy)
    if len(x_shape) == 2:
        gx.reshape(x_shape)[np.arange(x_shape[0]), safe] = coef
    else:
        np.put_along_axis(gx.reshape(x_shape), safe[:, None], coef[:, None], 1)
    return Tensor._wrap(gx)


@nll_loss.vjp(save=("target", "weight"))
def _(g, input, target, weight=None, ignore_index=-100, reduction="mean"):
    x_shape = tuple(input.shape) if len(input.shape) > 1 else (1,) + tuple(input.shape)
    gx = _nll_grad_arrays(g, target, weight, tuple(input.shape), x_shape, ignore_index, reduction)
    if gx is not None:
        return gx, None
    t = target if target.dim() == len(x_shape) - 1 else target.reshape(1)
    valid = t != ignore_index
    safe = ember.where(valid, t, 0)
    w = (weight[safe] if weight is not None else ember.ones(t.shape, dtype=g.dtype,
                                                            device=g.device)) * valid
    w = w.to(g.dtype)
    if reduction == "none":
        coef = -w * (g if len(input.shape) > 1 else g.reshape(1))
    elif reduction == "sum":
        coef = -w * g
    else:       # (an ignored target's gradient is 0 even when all are ignored: not 0 / 0)
        coef = ember.where(valid, -w * g / w.sum(), 0.0)
    gx = ember.zeros(x_shape, dtype=g.dtype, device=g.device).scatter(
        1, safe.unsqueeze(1), coef.unsqueeze(1))
    return gx.reshape(input.shape), None


nll_loss.samples = lambda dev, dt: [
    Sample(make((4, 3), dt), np.array([0, 2, 1, 2])),
    Sample(make((4, 3), dt), np.array([0, 2, -100, 2]), reduction="sum"),
    Sample(make((4, 3), dt), np.array([0, 2, 1, 1]),
           make((3,), dt, 0.5, 2, seed=3)).differentiable_in(0),
    Sample(make((2, 3, 5), dt), np.random.default_rng(4).integers(0, 3, (2, 5)),
           reduction="none"),
] if dt.category == 2 else []
nll_loss.torch_fn = "nn.functional.nll_loss"


def nll_node(input, reduction):
    """torch's node of nll_loss: nll_loss2d's for 3-d+ inputs, viewed back when unreduced
    (but for 4-d ones, nll_loss2d's own shape)."""
    if input.dim() < 3:
        return "NllLossBackward0"
    return "ViewBackward0" if reduction == "none" and input.dim() != 4 else "NllLoss2DBackward0"


nll_loss.grad_name_of = lambda input, target, weight=None, ignore_index=-100, reduction="mean": \
    nll_node(input, reduction)


# ---- losses torch computes in one kernel, so their backward is one node ----------------------

def _reduced(loss, reduction):
    if reduction == "none":
        return loss
    if type(loss) is np.ndarray and loss.dtype.char in "fd":   # (NumPy's mean less ~3 us of
        s = np.add.reduce(loss, None, out=np.empty((), loss.dtype))     # Python and scalars)
        return s if reduction == "sum" else np.true_divide(s, loss.size, out=s)
    return loss.sum() if reduction == "sum" else loss.mean()


def _fused_loss(name, xp, input, target, reduction, c=0.0):
    """A mean or summed loss of ``d = input - target`` (equal shapes) in one pass by
    ``_C.reduce`` (its terms summed pairwise as they are made); None where it does not apply."""
    if xp is not np or reduction == "none" or input.dtype.kind != "f" or \
            input.dtype.itemsize < 4 or (r := _C.reduce(
                name, input, tuple(range(input.ndim)), False, target, c, 1)) is None:
        return None
    return r if reduction == "sum" else np.true_divide(
        r, input.size if input.size < 1 << 24 else np.intp(input.size), out=r, casting="unsafe")


def _loss_meta(*args):
    """Meta of a loss ``(*tensors, reduction)``."""
    m = broadcast_meta(*args[:-1])
    return m if args[-1] == "none" else empty((), m.dtype)


def _mean_scale(g, loss_shape, reduction):
    """The gradient of each unreduced loss element: ``g`` divided by their count for a mean."""
    return g / math.prod(loss_shape) if reduction == "mean" else g


@op("mse_loss", tags=("autocast_fp32",), promote="common", method=False, function=False)
def mse_loss(xp, input, target, reduction="mean"):
    """Mean squared error ``(input - target)^2``, reduced (``reduction``: mean, sum, none)."""
    if (r := _fused_loss("mse", xp, input, target, reduction)) is not None:
        return r
    d = input - target
    return _reduced(d * d, reduction)


def _loss_grads(name, g, input, target, reduction, a=0.0, c=0.0, target_name=None):
    """The input's and target's gradients of a loss of equal-shaped float32 inputs by
    pointwise.h's op ``name`` (parameters ``a``, ``c``; the loss's gradient as the scale b or
    the array z), as Tensors, each in one pass where the reference takes 4-8: the target's by
    the op ``target_name``, or (None) the input's negated; None where no kernel applies."""
    arr = kernel_grads(g, input, target)
    if arr is None or arr[1].shape != arr[2].shape or arr[0].shape not in ((), arr[1].shape):
        return None
    z = arr[0] if arr[0].ndim else None
    s = 0.0 if z is not None else float(arr[0] / arr[1].size if reduction == "mean" else arr[0])
    run = lambda name: _C.pointwise(name, arr[1], a, s, c, other=arr[2], third=z)  # noqa: E731
    if (gd := run(name)) is None:
        return None
    gt = None if not needs_input_grad(1) else np.negative(gd) if target_name is None else \
        run(target_name)
    return Tensor._wrap(gd), gt if gt is None else Tensor._wrap(gt)


@mse_loss.vjp(save=("input", "target"))
def _(g, input, target, reduction="mean"):
    if (r := _loss_grads("loss_bwd", g, input, target, reduction)) is not None:
        return *r, None
    d = input - target
    gd = 2 * d * _mean_scale(g, d.shape, reduction)
    return gd, -gd, None


@op("smooth_l1_loss", tags=("autocast_fp32",), promote="common", method=False, function=False)
def smooth_l1_loss(xp, input, target, reduction="mean", beta=1.0):
    """``0.5 d^2 / beta`` where ``d = |input - target| < beta``, else ``d - 0.5 beta``."""
    if (r := _fused_loss("smooth_l1", xp, input, target, reduction, beta)) is not None:
        return r
    d = xp.abs(input - target)
    return _reduced(xp.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), reduction)


@op("huber_loss", tags=("autocast_fp32",), promote="common", method=False, function=False)
def huber_loss(xp, input, target, reduction="mean", delta=1.0):
    """``0.5 d^2`` where ``d = |input - target| < delta``, else ``delta (d - 0.5 delta)``."""
    if (r := _fused_loss("huber", xp, input, target, reduction, delta)) is not None:
        return r
    d = xp.abs(input - target)
    return _reduced(xp.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), reduction)


def _clipped_vjp(quadratic):
    """The backward of a loss quadratic in ``d = input - target`` up to ``|d| = c`` and linear
    beyond: ``d / c`` (smooth L1) or ``d`` (Huber) inside, ``sign(d)`` (times c) outside."""
    def vjp(g, input, target, reduction="mean", c=1.0):
        if (r := _loss_grads("loss_bwd", g, input, target, reduction, float(c),
                             2.0 - quadratic)) is not None:
            return *r, None, None
        d = input - target
        gd = ember.where(d.abs() < c, d / c if quadratic else d, d.sign() * (1 if quadratic else c))
        gd = gd * _mean_scale(g, d.shape, reduction)
        return gd, -gd, None, None
    return vjp


smooth_l1_loss.vjp(save=("input", "target"))(_clipped_vjp(True))
huber_loss.vjp(save=("input", "target"))(_clipped_vjp(False))


@op("binary_cross_entropy", tags=("autocast_fp32",), promote="common", method=False, function=False)
def binary_cross_entropy(xp, input, target, weight=None, reduction="mean"):
    """Binary cross entropy of probabilities ``input`` against ``target``; as torch, each log
    is clamped at -100."""
    loss = _C.pointwise("bce", input, other=target)
    if loss is None:
        loss = (target - 1) * xp.maximum(xp.log1p(-input), -100) - \
            target * xp.maximum(xp.log(input), -100)
    return _reduced(loss if weight is None else loss * weight, reduction)


@binary_cross_entropy.vjp(save=("input", "target", "weight"))
def _(g, input, target, weight=None, reduction="mean"):
    if weight is None and (r := _loss_grads("bce_bwd", g, input, target, reduction,
                                            target_name="bce_target_bwd")) is not None:
        return *r, None, None
    g = _mean_scale(g, input.shape, reduction)
    gw = g if weight is None else g * weight
    # NOTE: torch's formulas: (x - y) / max(x (1 - x), 1e-12) and -logit(x)
    gx = gw * (input - target) / ((1 - input) * input).clamp_min(1e-12)
    gt = -input.logit() * gw if needs_input_grad(1) else None
    loss = binary_cross_entropy(input, target, None, "none") if needs_input_grad(2) else None
    return gx, gt, None if loss is None else loss * g, None


def _bce_logits(xp, input, target, weight, pos_weight):
    """The unreduced loss ``(1 - y) x + (1 + (pw - 1) y) softplus(-x)``, times ``weight``."""
    if weight is None and pos_weight is None and \
            (r := _C.pointwise("bce_logits", input, other=target)) is not None:
        return r
    sp = xp.maximum(-input, 0) + xp.log1p(xp.exp(-xp.abs(input)))      # softplus(-x), stably
    lw = 1 if pos_weight is None else 1 + (pos_weight - 1) * target
    loss = (1 - target) * input + lw * sp
    return loss if weight is None else loss * weight


@op("binary_cross_entropy_with_logits", tags=("autocast_fp32",), promote="common",
    promote_args=(0, 1, 2, 3), method=False, function=False)
def binary_cross_entropy_with_logits(xp, input, target, weight=None, pos_weight=None,
                                     reduction="mean"):
    """Binary cross entropy of logits ``input`` against probabilities ``target``, computed
    stably; ``pos_weight`` weighs the positive term, ``weight`` each element."""
    return _reduced(_bce_logits(xp, input, target, weight, pos_weight), reduction)


@binary_cross_entropy_with_logits.vjp(save=("input", "target", "weight", "pos_weight"))
def _(g, input, target, weight=None, pos_weight=None, reduction="mean"):
    g = _mean_scale(g, np.broadcast_shapes(*(tuple(t.shape) for t in (
        input, target, weight, pos_weight) if t is not None)), reduction)
    gw = g if weight is None else g * weight
    sp = (lambda: (-input).clamp_min(0) + (-input.abs()).exp().log1p())   # softplus(-x)
    lw = 1 if pos_weight is None else 1 + (pos_weight - 1) * target
    # d/dx = (1 - y) - lw sigmoid(-x): sigmoid(x) - y without pos_weight
    r = _C.pointwise("bce_logits_bwd", input._data, float(gw), other=target._data) if (
        pos_weight is None and type(gw) is type(input) is type(target) is Tensor and
        gw.ndim == 0 and not _grad_state.grad_enabled) else None         # (a mean's or sum's g)
    gx = Tensor._wrap(r) if r is not None else ((1 - target) - lw * (1 - input.sigmoid())) * gw
    gt = (-input if pos_weight is None else (pos_weight - 1) * sp() - input) * gw \
        if needs_input_grad(1) else None
    sp = sp() if needs_input_grad(2) or needs_input_grad(3) else None
    return (gx, gt, ((1 - target) * input + lw * sp) * g if needs_input_grad(2) else None,
            target * sp * gw if needs_input_grad(3) else None, None)


def _loss_samples(dev, dt):
    if dt.category != 2:
        return []
    return [Sample(make((3, 4), dt), make((3, 4), dt, seed=1)),
            Sample(make((5,), dt), make((5,), dt, seed=1), reduction="sum"),
            Sample(make((2, 3), dt, noncontig=True), make((2, 3), dt, seed=1), reduction="none"),
            Sample(make((), dt), make((), dt, seed=1))]


def _bce_logits_samples(dev, dt):
    if dt.category != 2:
        return []
    y = make((3, 4), dt, 0, 1, seed=1)
    return [Sample(make((3, 4), dt), y), Sample(make((3, 4), dt), y, reduction="sum"),
            Sample(make((3, 4), dt), y, make((4,), dt, 0.5, 2, seed=2), reduction="none"),
            Sample(make((3, 4), dt), y, None, make((4,), dt, 0.5, 3, seed=3)),
            Sample(make((3, 4), dt, noncontig=True), y, make((3, 4), dt, 0.5, 2, seed=2),
                   make((4,), dt, 0.5, 3, seed=3), reduction="none")]


mse_loss.meta = lambda input, target, reduction="mean": _loss_meta(input, target, reduction)
binary_cross_entropy_with_logits.meta = lambda input, target, weight=None, pos_weight=None, \
    reduction="mean": _loss_meta(input, target, weight, pos_weight, reduction)
mse_loss.samples, mse_loss.torch_fn = _loss_samples, "nn.functional.mse_loss"
binary_cross_entropy.meta = lambda input, target, weight=None, reduction="mean": _loss_meta(
    input, target, weight, reduction)
binary_cross_entropy.samples = lambda dev, dt: [
    Sample(make((3, 4), dt, 0.05, 0.95), make((3, 4), dt, 0, 1, seed=1)),
    Sample(make((5,), dt, 0.05, 0.95), make((5,), dt, 0, 1, seed=1), None, "sum"),
    Sample(make((2, 3), dt, 0.05, 0.95, noncontig=True), make((2, 3), dt, 0, 1, seed=1),
           make((3,), dt, 0.5, 2, seed=2), "none")] if dt.category == 2 else []
binary_cross_entropy.torch_ref = lambda torch, input, target, weight=None, reduction="mean": \
    torch.nn.functional.binary_cross_entropy(input, target, weight, reduction=reduction)
smooth_l1_loss.meta = lambda input, target, reduction="mean", beta=1.0: _loss_meta(
    input, target, reduction)
huber_loss.meta = lambda input, target, reduction="mean", delta=1.0: _loss_meta(
    input, target, reduction)
smooth_l1_loss.samples = huber_loss.samples = lambda dev, dt: _loss_samples(dev, dt) + [
    Sample(make((3, 4), dt, -3, 3), make((3, 4), dt, seed=1), "sum", 0.5)] * (dt.category == 2)
smooth_l1_loss.torch_fn, huber_loss.torch_fn = (f"nn.functional.{n}" for n in (
    "smooth_l1_loss", "huber_loss"))
binary_cross_entropy_with_logits.samples = _bce_logits_samples
# (pos_weight follows reduction's legacy arguments in the public function)
binary_cross_entropy_with_logits.torch_ref = lambda torch, input, target, weight=None, \
    pos_weight=None, reduction="mean": torch.nn.functional.binary_cross_entropy_with_logits(
        input, target, weight, reduction=reduction, pos_weight=pos_weight)


# ---- activations torch computes in one kernel, so their backward is one node ------------------
# (of float inputs, as torch's kernels; float16/bfloat16 computed in float32: the pointwise tag)

def _floating(xp, name, input):
    dt = Tensor._dtype_of(input)
    if dt.category != 2:
        where = "cpu" if xp is np else "cuda"
        raise NotImplementedError(f"\"{name}_{where}\" not implemented for '{dt.name}'")
    return input


def _activation(d, *options):
    """Meta, samples (keyword ``options`` dicts) and torch name of activation OpDef ``d``."""
    d.meta, d.torch_fn = same_meta, f"nn.functional.{d.name}"
    d.samples = lambda dev, dt: [Sample(make((3, 4), dt, -5, 5), **o) for o in options] + [
        Sample(make((2, 3), dt, -5, 5, noncontig=True)), Sample(make((), dt))] \
        if dt.category == 2 else []


def _act_op(name):
    return op(name, tags=("pointwise",), promote="common", method=False, function=False)


def _fused_or(gx, ember_ops):
    """the fused backward's gradient ``gx``, or where there is none, ``ember_ops()``'s"""
    return gx if gx is not None else ember_ops()


@_act_op("silu")
def silu(xp, input):
    """``x * sigmoid(x)``."""
    x = _floating(xp, "silu", input)
    r = _C.pointwise("silu", x)
    return x / (1 + xp.exp(-x)) if r is None else r


@silu.vjp(save=("input",))
def _(g, input):
    if (gx := fused_grad("silu", input, g)) is not None:
        return gx
    s = input.sigmoid()
    return g * (s * (1 + input * (1 - s)))


@_act_op("mish")
def mish(xp, input):
    """``x * tanh(softplus(x))``."""
    x = _floating(xp, "mish", input)
    if (r := _C.pointwise("mish", x)) is not None:
        return r
    return x * xp.tanh(xp.logaddexp(x, 0))


@mish.vjp(save=("input",))
def _(g, input):
    if (gx := fused_grad("mish", input, g)) is not None:
        return gx
    t = ember.nn.functional.softplus(input).tanh()
    return g * (t + input * input.sigmoid() * (1 - t * t))


@_act_op("leaky_relu")
def leaky_relu(xp, input, negative_slope=0.01):
    """``x`` where positive, else ``negative_slope * x``."""
    x = _floating(xp, "leaky_relu", input)
    r = _C.pointwise("leaky_relu", x, negative_slope)
    return xp.where(x > 0, x, x * negative_slope) if r is None else r


leaky_relu.vjp(save=("input",))(lambda g, input, negative_slope=0.01: (
    _fused_or(fused_grad("leaky_relu", input, g, negative_slope),
              lambda: ember.where(input > 0, g, g * negative_slope)), None))



@_act_op("elu")
def elu(xp, input, alpha=1.0, scale=1.0, input_scale=1.0):
    """``scale * x`` where positive, else ``scale * alpha * (exp(input_scale * x) - 1)`` (selu
    and celu are elus, as in torch)."""
    x = _floating(xp, "elu", input)
    if (r := _C.pointwise("elu", x, alpha * scale, scale, input_scale)) is not None:
        return r
    return xp.where(x > 0, x * scale, xp.expm1(x * input_scale) * (alpha * scale))


@elu.vjp(save=("input",))
def _(g, input, alpha=1.0, scale=1.0, input_scale=1.0):
    gx = fused_grad("elu", input, g, alpha * scale * input_scale, scale, input_scale)
    if gx is None:
        neg = (input * input_scale).exp() * (alpha * scale * input_scale)
        gx = ember.where(input > 0, g * scale, g * neg)
    return gx, None, None, None


@_act_op("celu")
def celu(xp, input, alpha=1.0):
    """``x`` where positive, else ``alpha * (exp(x / alpha) - 1)``."""
    return elu.fwd(xp, input, alpha, 1.0, 1.0 / alpha)


celu.vjp(save=("input",))(lambda g, input, alpha=1.0: (
    elu.vjp_fn(g, input, alpha, 1.0, 1.0 / alpha)[0], None))


@_act_op("hardtanh")
def hardtanh(xp, input, min_val=-1.0, max_val=1.0):
    """``x`` clamped to ``[min_val, max_val]`` (integers too, as torch's)."""
    r = _C.pointwise("clamp", input, min_val, max_val)
    return xp.clip(input, min_val, max_val) if r is None else r


hardtanh.vjp(save=("input",))(lambda g, input, min_val=-1.0, max_val=1.0: (_fused_or(
    fused_grad("hardtanh", input, g, min_val, max_val),
    lambda: ember.where((input > min_val) & (input < max_val), g, 0.0)), None, None))


@_act_op("hardsigmoid")
def hardsigmoid(xp, input):
    """``x / 6 + 1/2`` clamped to ``[0, 1]``."""
    x = _floating(xp, "hardsigmoid", input)
    r = _C.pointwise("hardsigmoid", x)
    return xp.clip(x + 3, 0, 6) / 6 if r is None else r


# NOTE: torch's backward multiplies by 1/6 rounded to float32, whatever the dtype
hardsigmoid.vjp(save=("input",))(lambda g, input: _fused_or(
    fused_grad("hardsigmoid", input, g, float(np.float32(1 / 6))), lambda: ember.where(
        (input > -3) & (input < 3), g * float(np.float32(1 / 6)), 0.0)))


@_act_op("hardswish")
def hardswish(xp, input):
    """``x * relu6(x + 3) / 6``."""
    x = _floating(xp, "hardswish", input)
    r = _C.pointwise("hardswish", x)
    return x * xp.clip(x + 3, 0, 6) / 6 if r is None else r


hardswish.vjp(save=("input",))(lambda g, input: _fused_or(
    fused_grad("hardswish", input, g), lambda: ember.where(
        input < -3, 0.0, ember.where(input <= 3, g * (input / 3 + 0.5), g))))


@_act_op("softplus")
def softplus(xp, input, beta=1.0, threshold=20.0):
    """``log(1 + exp(beta x)) / beta``, the identity where ``beta x > threshold``."""
    if (r := _C.pointwise("softplus", _floating(xp, "softplus", input), beta, threshold)) \
            is not None:
        return r
    z = input * beta
    # NOTE: torch switches to the identity above threshold; clip before exp, which the
    # untaken branch must not overflow
    return xp.where(z > threshold, input, xp.log1p(xp.exp(xp.minimum(z, threshold))) / beta)


softplus.vjp(save=("input",))(lambda g, input, beta=1.0, threshold=20.0: (_fused_or(
    fused_grad("softplus", input, g, beta, threshold),
    lambda: ember.where(input * beta > threshold, g, g * (input * beta).sigmoid())), None, None))


@_act_op("logsigmoid")
def logsigmoid(xp, input):
    """``log(sigmoid(x))``, computed stably."""
    x = _floating(xp, "log_sigmoid", input)
    if (r := _C.pointwise("logsigmoid", x)) is not None:
        return r
    return xp.minimum(x, 0) - xp.log1p(xp.exp(-xp.abs(x)))


logsigmoid.vjp(save=("input",))(lambda g, input: _fused_or(
    fused_grad("logsigmoid", input, g), lambda: g * (-input).sigmoid()))


@_act_op("hardshrink")
def hardshrink(xp, input, lambd=0.5):
    """``x`` where ``|x| > lambd``, else 0."""
    x = _floating(xp, "hardshrink", input)
    if (r := _C.pointwise("hardshrink", x, lambd)) is not None:
        return r
    return xp.where((x > lambd) | (x < -lambd), x, 0 * x)


@_act_op("softshrink")
def softshrink(xp, input, lambd=0.5):
    """``x`` moved ``lambd`` towards 0, 0 where ``|x| <= lambd``."""
    x = _floating(xp, "softshrink", input)
    if (r := _C.pointwise("softshrink", x, lambd)) is not None:
        return r
    return xp.where(x > lambd, x - lambd, xp.where(x < -lambd, x + lambd, 0 * x))


# (both pass the gradient where |x| > lambd)
@hardshrink.vjp(save=("input",))
def _(g, input, lambd=0.5):
    if (r := fused_grad("shrink", input, g, lambd)) is not None:
        return r, None
    return ember.where((input > lambd) | (input < -lambd), g, 0.0), None



softshrink.vjp(save=("input",))(hardshrink.vjp_fn)


@op("threshold", tags=("pointwise",), promote="common", promote_args=(0,), method=False,
    function=False)
def threshold(xp, input, threshold, value):
    """``value`` where ``x <= threshold``, else ``x`` (nan stays; integers too, as torch's)."""
    if (r := _C.pointwise("threshold", input, threshold, value)) is not None:
        return r
    return xp.where(input <= threshold, xp.asarray(value, input.dtype), input)


threshold.vjp(save=("input",))(lambda g, input, threshold, value: (
    threshold_backward(g, input, threshold), None, None))
logsigmoid.grad_name = "LogSigmoidBackward0"
_activation(silu)
_activation(mish)
_activation(leaky_relu, {}, {"negative_slope": 0.2})
_activation(elu, {}, {"alpha": 0.5})
_activation(celu, {}, {"alpha": 2.0})
_activation(hardtanh, {}, {"min_val": -2.0, "max_val": 0.5})
_activation(hardsigmoid)
_activation(hardswish)
_activation(softplus, {}, {"beta": 2.0, "threshold": 3.0})
_activation(logsigmoid)
_activation(hardshrink, {}, {"lambd": 1.5})
_activation(softshrink, {}, {"lambd": 1.5})
_activation(threshold)
threshold.samples = lambda dev, dt: [
    Sample(make((3, 4), dt, -5, 5), 0.5, 2.0), Sample(make((2, 3), dt, noncontig=True), -1, -3),
    Sample(make((), dt), 0.0, 1.0)] if dt.category in (1, 2) else []


# ---- batch_norm: torch's native kernel, one node --------------------------------------------

@op("native_batch_norm", nondiff_outputs=(1, 2), method=False, function=False)
def native_batch_norm(xp, input, weight, bias, running_mean, running_var, training, eps):
    """Normalize each channel of (N, C, *) ``input`` by its batch statistics (``training``) or
    the running ones, then scale and shift: ``(output, mean, biased variance)`` used."""
    x = input.astype(np.float32) if input.dtype.itemsize < 4 else input   # (torch's opmath)
    dims, shape = (0,) + tuple(range(2, x.ndim)), (1, -1) + (1,) * (x.ndim - 2)
    mean, var = (_moments(x, dims, shape)[:2] if xp is np else (x.mean(axis=dims), x.var(
        axis=dims))) if training else (running_mean, running_var)
    out = (x - mean.reshape(shape)) * (1 / xp.sqrt(var.reshape(shape) + eps))
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out.astype(input.dtype, copy=False), mean.astype(input.dtype), var.astype(input.dtype)


def _moments(x, dims, shape, only_mean=0):
    """(mean, biased variance, ``x`` less its mean) over ``dims``: np.mean and np.var's passes
    without their Python layers (~5 us a small call)."""
    n = max(1, x.size // max(1, x.shape[1]))
    mean = np.add.reduce(x, dims) / n
    if only_mean:
        return mean.reshape(shape), None, None
    xc = x - mean.reshape(shape)
    return mean, np.add.reduce(xc * xc, dims) / n, xc


# NOTE: a training call is given no running statistics (the caller updates them in place from
# the outputs): saved, they would fail the version check of the backward that does not read them
@native_batch_norm.vjp(save=("input", "weight", "running_mean", "running_var"))
def _(grads, input, weight, bias, running_mean, running_var, training, eps):
    # (training: the statistics are the input's again, so a double backward sees through them)
    g, nd = grads[0], input.dim()
    dims, shape = (0,) + tuple(range(2, nd)), (1, -1) + (1,) * (nd - 2)
    # the same formulas in NumPy where nothing differentiates them (~15 small dispatches)
    arrays = kernel_grads(g, input, *(t for t in (weight, running_mean, running_var) if t is
                                      not None and (t is weight or not training)))
    if arrays and arrays[0].dtype.itemsize >= 4:
        g, x, w = arrays[0], arrays[1], arrays[2] if weight is not None else None
        _, var, xc = _moments(x, dims, shape) if training else (
            None, arrays[-1], x - arrays[-2].reshape(shape))
        rstd = 1 / np.sqrt(var.reshape(shape) + eps)
        xhat = xc * rstd
        gh = g if w is None else g * w.reshape(shape)
        gx = rstd * (gh - _moments(gh, dims, shape, 1)[0] - xhat * _moments(
            gh * xhat, dims, shape, 1)[0]) if training else gh * rstd
        return (Tensor._wrap(gx), Tensor._wrap((g * xhat).sum(dims)) if needs_input_grad(1)
                else None, Tensor._wrap(g.sum(dims)) if needs_input_grad(2) else None) + \
            (None,) * 4
    mean, var = (input.mean(dims, keepdim=True), input.var(dims, keepdim=True, correction=0)) \
        if training else (running_mean.detach().reshape(shape), running_var.detach().reshape(shape))
    rstd = (var + eps).rsqrt()
    xhat = (input - mean) * rstd
    gh = g if weight is None else g * weight.reshape(shape)
    gx = rstd * (gh - gh.mean(dims, keepdim=True) - xhat * (gh * xhat).mean(
        dims, keepdim=True)) if training else gh * rstd
    return (gx, (g * xhat).sum(dims) if needs_input_grad(1) else None,
            g.sum(dims) if needs_input_grad(2) else None, None, None, None, None)


native_batch_norm.meta = lambda input, *args: (empty(input.shape, input.dtype),) + (
    empty(input.shape[1:2], input.dtype),) * 2


def _batch_norm_samples(dev, dt):
    if dt.category != 2:
        return []
    c, stats = (make((3,), dt, 0.5, 2, seed=s) for s in (1, 2)), make((3,), dt, -1, 1, seed=3)
    w, b = c
    rv = make((3,), dt, 0.5, 2, seed=4)
    # (the running statistics are not differentiable, as in torch)
    return [s.differentiable_in(0, 1, 2) for s in (
        Sample(make((4, 3, 5), dt), w, b, stats, rv, True, 1e-5),
        Sample(make((4, 3, 5), dt), w, b, stats, rv, False, 1e-5),
        Sample(make((6, 3), dt, noncontig=True), None, None, stats, rv, True, 1e-3),
        Sample(make((2, 3, 2, 2), dt), w, None, stats, rv, False, 1e-5))]


native_batch_norm.samples = _batch_norm_samples
# (the running statistics as torch's own copies, which its training call updates)
native_batch_norm.torch_ref = lambda torch, input, weight, bias, running_mean, running_var, \
    training, eps: (torch.nn.functional.batch_norm(
        input, running_mean.detach().clone(), running_var.detach().clone(), weight, bias,
        training, 0.1, eps),) + tuple(t.detach() for t in (
            (input.mean((0,) + tuple(range(2, input.dim()))), input.var(
                (0,) + tuple(range(2, input.dim())), correction=0)) if training else
            (running_mean, running_var)))


# ---- group_norm: torch's native kernel, one node --------------------------------------------

@op("native_group_norm", method=False, function=False)
def native_group_norm(xp, input, weight, bias, group, eps):
    """Normalize (N, C, *) ``input`` over each of ``group`` groups of channels (and the spatial
    dims), then scale and shift each channel."""
    x = input.astype(np.float32) if input.dtype.itemsize < 4 else input   # (torch's opmath)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    from .nn_rows import _norm_kernel     # (nn_rows imports this module)
    # each (sample, group) is a row of layer_norm's kernel, whose rows take the group's
    # weights (per channel, repeated over the positions) in turn
    s = x.size // max(x.shape[0] * x.shape[1], 1)
    out = _norm_kernel(xp, x, _per_position(weight, s), _per_position(bias, s),
                       x.size // max(x.shape[0] * group, 1), eps, 0, group) \
        if xp is np and x.size else None
    if out is not None:
        return out.astype(input.dtype, copy=False)
    g = x.reshape(x.shape[0], group, -1)
    out = ((g - g.mean(-1, keepdims=True)) / xp.sqrt(g.var(-1, keepdims=True) + eps)).reshape(
        x.shape)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out.astype(input.dtype, copy=False)


def _per_position(w, s):
    return None if w is None else w.repeat(s)


def _group_norm_kernel_grads(g, input, weight, group, eps):
    """native_group_norm's gradients by layer_norm's backward kernel (rows as the forward's),
    or None where it does not apply (see kernel_grads)."""
    arrays = kernel_grads(g, input, *(() if weight is None else (weight,)))
    if not arrays or not arrays[1].size:
        return None
    from .nn_rows import _norm_bwd_arrays
    x = arrays[1]
    c, s = x.shape[1], x.size // (x.shape[0] * x.shape[1])
    r = _norm_bwd_arrays(arrays[0], x, _per_position(arrays[2] if len(arrays) > 2 else None, s),
                         x.size // (x.shape[0] * group), eps, 0,
                         (weight is not None and needs_input_grad(1), needs_input_grad(2)), group)

    def total(part):        # (per position: summed over each channel's)
        return None if part is None else Tensor._wrap(part.reshape(c, s).sum(1).astype(x.dtype))
    return r and (Tensor._wrap(r[0]), total(r[1]), total(r[2]), None, None)


@native_group_norm.vjp(save=("input", "weight"))
def _(g, input, weight, bias, group, eps):
    grads = _group_norm_kernel_grads(g, input, weight, group, eps)
    if grads:
        return grads
    shape, dims = (1, -1) + (1,) * (input.dim() - 2), (0,) + tuple(range(2, input.dim()))
    x = input.reshape(input.shape[0], group, -1)
    rstd = (x.var(-1, keepdim=True, correction=0) + eps).rsqrt()
    xhat = (x - x.mean(-1, keepdim=True)) * rstd
    gh = (g if weight is None else g * weight.reshape(shape)).reshape(x.shape)
    gx = rstd * (gh - gh.mean(-1, keepdim=True) - xhat * (gh * xhat).mean(-1, keepdim=True))
    return (gx.reshape(input.shape), (g * xhat.reshape(input.shape)).sum(dims)
            if needs_input_grad(1) else None, g.sum(dims) if needs_input_grad(2) else None,
            None, None)


native_group_norm.meta = same_meta
native_group_norm.samples = lambda dev, dt: [
    Sample(make((2, 4, 5), dt), make((4,), dt, 0.5, 2, seed=1), make((4,), dt, seed=2), 2, 1e-5),
    Sample(make((3, 6, 2, 2), dt), None, None, 3, 1e-5),
    Sample(make((2, 3), dt, noncontig=True), make((3,), dt, seed=1), None, 1, 1e-3)] \
    if dt.category == 2 else []
native_group_norm.torch_ref = lambda torch, input, weight, bias, group, eps: \
    torch.nn.functional.group_norm(input, group, weight, bias, eps)


# ---- forward mode (tangents.py) ----------------------------------------------------------


def _softmax_jvp(opdef, args, kwargs, tangents, out):
    dim = named(opdef, args, kwargs)["dim"]
    t = tangents.get(0, tangents.get("input")).to(out.dtype)
    if opdef is softmax:
        return out * (t - (out * t).sum(dim, keepdim=True))
    return t - (out.exp() * t).sum(dim, keepdim=True)


def _batch_norm_jvp(a, t, out):
    x, nd, w, b = a["input"], a["input"].dim(), a["weight"], a["bias"]
    dims, shape = (0,) + tuple(range(2, nd)), (1, -1) + (1,) * (nd - 2)
    if a["training"]:
        xh, txh = normalized(x, t["input"], dims, a["eps"])
    else:
        r = (a["running_var"].reshape(shape) + a["eps"]).rsqrt()
        xh, txh = (x - a["running_mean"].reshape(shape)) * r, t["input"] * r
    return affine(xh, txh, t, w, b, shape), None, None


def _group_norm_jvp(a, t, out):
    x = a["input"]
    n, shape = x.shape[0], (1, -1) + (1,) * (x.dim() - 2)
    xh, txh = normalized(x.reshape(n, a["group"], -1), t["input"].reshape(n, a["group"], -1),
                         (-1,), a["eps"])
    return affine(xh.reshape(x.shape), txh.reshape(x.shape), t, a["weight"], a["bias"], shape)


for _d in (binary_cross_entropy, binary_cross_entropy_with_logits, huber_loss, mse_loss,
           smooth_l1_loss):
    _d.jvp = loss
embedding.jvp, nll_loss.jvp = LINEAR, linear_with(fixed=("weight",))
linear.jvp = multilinear("bias")
softmax.jvp = log_softmax.jvp = _softmax_jvp
native_batch_norm.jvp = fallback_unless(
    lambda a: a["training"] or not any(isinstance(a[k], Tensor) and a[k].requires_grad
                                       for k in ("running_mean", "running_var")),
    decomposed(_batch_norm_jvp))
native_group_norm.jvp = decomposed(_group_norm_jvp)
