"""Neural-network ops with fused forwards and hand-written backwards: linear, embedding,
softmax, log_softmax, and ``kernel_grads`` (when a backward may run a C kernel). Losses live in
losses.py, activations in activations.py, batch/group norm in normalization.py; composite
layers in ember/nn/functional.py."""
import math

import numpy as np

from .._C import kernels as _C
from . import gemm
from .indexing import check_range, take_rows
from .._tensor import Tensor
from ..autograd.grad_mode import state as _grad_state
from ..autograd.graph import needs_input_grad
from .linalg import _small_mm, matmul, matmul_node
from .meta import empty
from .tangents import LINEAR, multilinear, named
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
    if type(bias) is np.ndarray and (out := _small_mm(xp, input, weight.T, bias, 1, 1)) is not None:
        return out      # (a few thousand multiply-adds and the bias in one call: linalg.py's)
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
    # (a table not C-contiguous stays on NumPy's take: the kernel would copy it whole)
    if weight.flags.c_contiguous and (out := take_rows(weight, indices)) is not None:
        return out
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


def _softmax_fwd(xp, x, dim, dtype, log):
    """softmax (log=0) or log_softmax (1) by a kernel, or None (the caller's NumPy code runs):
    the common call, a contiguous float array along a valid ``dim``, straight (without
    _softmax_kernel's Tensor, device and copy cases, ~1 us of a small call); else cast to
    ``dtype``, then _softmax_kernel."""
    nd = x.ndim
    if dtype is not None or xp is not np or type(dim) is not int or not -nd <= dim < nd or \
            not x.size or not x.flags.c_contiguous or (fn := _C.kernel("softmax", x.dtype)) is None:
        x = x.astype(_softmax_dtype(x, dtype), copy=False)
        return _softmax_kernel(xp, x, None, dim, log) if x.ndim else xp.full_like(x, 1 - log)
    # (C-contiguous: a dim longer than 1 has the stride of the elements after it)
    inner = x.strides[dim] // x.itemsize if (d := x.shape[dim]) > 1 else 1
    fn(_C.ptr(x), None, _C.ptr(out := np.empty(x.shape, x.dtype)), x.size // (d * inner), d,
       inner, log, 0, _C.num_threads())
    return out


def _softmax_op(name, log, doc):
    """softmax (``log`` 0) or log_softmax (1): the op, its backward, its meta."""
    def fwd(xp, input, dim, dtype=None):
        if (y := _softmax_fwd(xp, input, dim, dtype, log)) is not None:
            return y
        x = input.astype(_softmax_dtype(input, dtype), copy=False)
        s = x - x.max(axis=dim, keepdims=True)
        if log:
            return s - xp.log(xp.exp(s).sum(axis=dim, keepdims=True))
        e = xp.exp(s)
        return e / e.sum(axis=dim, keepdims=True)
    fwd.__name__ = fwd.__qualname__ = name
    fwd.__doc__ = doc
    d = op(name, tags=("autocast_fp32_cuda",))(fwd)

    @d.vjp(save=("result",))
    def _(g, input, dim, dtype=None, result=None):
        if result.dim() == 0:
            return g * 0
        if (gx := _softmax_kernel(np, g, result, dim, log)) is not None:
            return gx
        if log:
            return g - result.exp() * g.sum(dim, keepdim=True)
        return result * (g - (g * result).sum(dim, keepdim=True))
    d.meta = lambda x, dim, dtype=None: empty(x.shape, _softmax_dtype(x, dtype))
    return d


softmax = _softmax_op("softmax", 0, """``exp(x) / sum(exp(x))`` along ``dim``, computed stably.""")
softmax.samples = lambda dev, dt: [Sample(make((3, 4), dt), 1), Sample(make((3, 4), dt), 0),
                                   Sample(make((2, 3, 4), dt), -1)] if dt.category == 2 else []
log_softmax = _softmax_op("log_softmax", 1, "``log(softmax(x))`` along ``dim``, computed stably.")
log_softmax.samples = softmax.samples


# ---- forward mode (tangents.py) ----------------------------------------------------------


def _softmax_jvp(opdef, args, kwargs, tangents, out):
    dim = named(opdef, args, kwargs)["dim"]
    t = tangents.get(0, tangents.get("input")).to(out.dtype)
    if opdef is softmax:
        return out * (t - (out * t).sum(dim, keepdim=True))
    return t - (out.exp() * t).sum(dim, keepdim=True)


embedding.jvp = LINEAR
linear.jvp = multilinear("bias")
softmax.jvp = log_softmax.jvp = _softmax_jvp
