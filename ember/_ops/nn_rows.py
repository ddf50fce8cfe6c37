"""Activation, normalization and loss ops with a C kernel beside their NumPy code: gelu,
layer_norm, rms_norm, cross_entropy_loss (class indices). The NumPy forward is the reference
(and the path on cuda, for other dtypes, or with ``EMBER_NO_C=1``); the backward runs the
kernel when nothing differentiates it, else ember ops, so double backward works. See
docs/kernels.md."""
import math

import numpy as np

import ember

from .._C import kernels as _C
from .._tensor import Tensor
from .meta import broadcast_meta, empty, same_meta
from .losses import _I64, nll_loss, nll_node
from .nn import kernel_grads, log_softmax
from .pointwise_math import _erf_erfc
from .tangents import affine, decomposed, normalized, reduction
from .registry import op
from .samples import ErrorSample, Sample, const, make

_GELU_K, _GELU_C, _SQRT_2PI = math.sqrt(2.0 / math.pi), 0.044715, math.sqrt(2 * math.pi)


def _wide(x):
    """float32 for half-width floats (bfloat16...), as torch computes them."""
    return x.astype(np.float32) if x.dtype.itemsize < 4 else x


# ---- gelu -------------------------------------------------------------------------------

def _gelu_kernel(xp, x, g, approximate):
    """gelu(x), or with ``g`` its backward ``g * gelu'(x)``, by the C kernel; None if none
    applies. Arrays in (forward) give an array; Tensors in (backward) give a Tensor. On a
    GPU, ember's fused CUDA kernel."""
    if type(x._data if isinstance(x, Tensor) else x) is not np.ndarray:
        from ..cuda import _kernels as cuda_kernels
        return cuda_kernels.gelu(x, g, approximate)
    wrap = isinstance(x, Tensor)
    if wrap:
        arrays = kernel_grads(x, g)
        if arrays is None:
            return None
        x, g = arrays
    fn = _C.kernel("gelu", x.dtype) if xp is np else None
    if fn is None:
        return None
    x, g = _C.contiguous(x), None if g is None else _C.contiguous(g)
    out = np.empty(x.shape, x.dtype)
    fn(_C.ptr(x), _C.ptr(g), _C.ptr(out), x.size, approximate == "tanh", _C.num_threads())
    return Tensor._wrap(out) if wrap else out


@op("gelu", tags=("pointwise",), promote="common", method=False, function=False)
def gelu(xp, input, approximate="none"):
    """Gaussian error linear unit ``x * Phi(x)``, exact (erf) or the ``"tanh"`` approximation
    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
    if approximate not in ("none", "tanh"):
        raise RuntimeError(f"approximate argument must be either none or tanh, got {approximate}")
    dt = Tensor._dtype_of(input)
    if dt.category < 2:
        raise NotImplementedError(f"\"GeluKernelImpl\" not implemented for '{dt.name}'")
    y = _gelu_kernel(xp, input, None, approximate)
    if y is not None:
        return y
    x = _wide(input)
    if approximate == "tanh":
        y = 0.5 * x * (1.0 + xp.tanh(_GELU_K * (x + _GELU_C * (x * x * x))))
    else:
        y = 0.5 * x * (1.0 + _erf_erfc(xp, x * (1.0 / math.sqrt(2.0)), "erf"))
    return y.astype(input.dtype, copy=False)


gelu.vjp(save=("input",))(lambda g, input, approximate="none":
                          gelu_backward(g, input, approximate))


@op("gelu_backward", tags=("pointwise",), promote="common", method=False, function=False)
def gelu_backward(xp, grad_output, input, approximate="none"):
    """``grad_output * gelu'(input)`` as one op (torch's ``aten::gelu_backward``): the C kernel,
    and in ``ember.compile``'s graphs one node its kernels inline, not the erf and exp
    (and their products) of the formula in ember ops."""
    if grad_output.shape == input.shape and grad_output.dtype == input.dtype:
        gx = _gelu_kernel(xp, input, grad_output, approximate)
        if gx is not None:
            return gx
    x, g = _wide(input), _wide(grad_output)
    if approximate == "tanh":
        t = xp.tanh(_GELU_K * (x + _GELU_C * x * x * x))
        d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _GELU_K * (1 + 3 * _GELU_C * x * x)
    else:
        cdf = 0.5 * _erf_erfc(xp, x * -(0.5 ** 0.5), "erfc")     # (no 1 + erf: it cancels)
        d = cdf + x * xp.exp(-0.5 * x * x) * (1 / _SQRT_2PI)
    return (g * d).astype(input.dtype, copy=False)


@gelu_backward.vjp(save=("grad_output", "input"))
def _(gg, grad_output, input, approximate="none"):
    x = input
    if approximate == "tanh":       # (1 - t^2) (u' - x t u'^2 + x u'' / 2), u = k (x + c x^3)
        t = ember.tanh(_GELU_K * (x + _GELU_C * x * x * x))
        du = _GELU_K * (1 + 3 * _GELU_C * x * x)
        d2 = (1 - t * t) * (du - x * t * du * du + 3 * _GELU_K * _GELU_C * x * x)
    else:                           # phi(x) (2 - x^2)
        d2 = ember.exp(-0.5 * x * x) * (1 / _SQRT_2PI) * (2 - x * x)
    return gelu_backward(gg, x, approximate), gg * grad_output * d2


gelu_backward.meta = broadcast_meta
gelu_backward.samples = lambda dev, dt: [
    Sample(make((3, 4), dt, -4, 4), make((3, 4), dt, -4, 4)),
    Sample(make((2, 5), dt), make((2, 5), dt, -4, 4), approximate="tanh")] \
    if dt.category == 2 else []
# (aten::gelu_backward's Phi(x) as 1 + erf(x / sqrt 2) cancels below x = -5; erfc does not)
gelu_backward.torch_ref = lambda lib, g, x, approximate="none": \
    lib.ops.aten.gelu_backward(g, x, approximate="tanh") if approximate == "tanh" else \
    g * (0.5 * lib.special.erfc(x * -(0.5 ** 0.5)) + x * lib.exp(-0.5 * x * x) / _SQRT_2PI)
gelu.meta = same_meta
gelu.half_ulps = (None, "torch's float32 erf cancels in 1 + erf(x) below x = -3, down to -0")
gelu.samples = lambda dev, dt: [
    Sample(make((3, 4), dt, -4, 4)), Sample(make((2, 3, 5), dt, -4, 4), approximate="tanh"),
    Sample(make((3, 4), dt, noncontig=True)), Sample(make((), dt))] if dt.category == 2 else []
gelu.errors = [ErrorSample(Sample(const(3), approximate="bad"), RuntimeError,
                           "approximate argument must be either none or tanh")]
gelu.torch_fn = "nn.functional.gelu"


# ---- layer_norm, rms_norm -------------------------------------------------------------------

def _norm_rows(name, input, normalized_shape):
    """The number of trailing elements normalized, checking ``normalized_shape``."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if len(shape) == 0 or tuple(input.shape[len(input.shape) - len(shape):]) != shape:
        raise RuntimeError(f"{name}: input shape {list(input.shape)} does not end with "
                           f"normalized_shape {list(shape)}")
    return len(shape), math.prod(shape)


def _norm_kernel(xp, x, weight, bias, n, eps, rms, wg=1):
    """layer_norm (rms=0) or rms_norm (1) of rows of ``n`` by the C kernel, or None; ``weight``
    and ``bias``: ``wg`` rows of ``n`` that the rows take in turn (group_norm's channels)."""
    if xp is not np:
        from ..cuda import _kernels as cuda_kernels
        return cuda_kernels.norm(x, weight, bias, n, eps, rms)
    fn = _C.kernel("layer_norm", x.dtype) if xp is np and x.size else None
    if fn is None:
        return None
    x = _C.contiguous(x)
    w = np.ones(wg * n, x.dtype) if weight is None else _C.contiguous(weight, x.dtype)
    b = np.zeros(wg * n, x.dtype) if bias is None else _C.contiguous(bias, x.dtype)
    out = np.empty(x.shape, x.dtype)
    fn(_C.ptr(x), _C.ptr(w), _C.ptr(b), _C.ptr(out), None, None, x.size // n, n,
       eps, rms, wg, _C.num_threads())
    return out


def _norm_bwd_arrays(g, x, w, n, eps, rms, sums, wg=1):
    """(gx, sum of g xhat, sum of g) over rows of ``n`` (the sums None unless ``sums``; float64,
    of ``wg`` rows of ``n`` as ``w``, which may be None) by the C kernel, or None."""
    fn = _C.kernel("layer_norm_bwd", x.dtype)
    if fn is None or not x.size:
        return None
    g, x = _C.contiguous(g), _C.contiguous(x)
    w = np.ones(wg * n, x.dtype) if w is None else _C.contiguous(w)
    nt = _C.num_threads()
    gx = np.empty(x.shape, x.dtype)
    gw, gb = (np.zeros((nt, wg * n)) if s else None for s in sums)
    fn(_C.ptr(g), _C.ptr(x), _C.ptr(w), _C.ptr(gx), _C.ptr(gw), _C.ptr(gb),
       x.size // n, n, eps, rms, wg, nt)
    return gx, gw if gw is None else gw.sum(0), gb if gb is None else gb.sum(0)


def _norm_backward_kernel(g, input, weight, k, eps, rms, want_bias):
    """(gx, gw, gb) of layer_norm (rms=0) or rms_norm (1) by the C kernel, or None."""
    arrays = kernel_grads(g, input, *(() if weight is None else (weight,)))
    shape = arrays and arrays[1].shape[arrays[1].ndim - k:]
    r = arrays and _norm_bwd_arrays(arrays[0], arrays[1], arrays[2] if len(arrays) > 2 else None,
                                    math.prod(shape), eps, rms, (weight is not None, want_bias))
    if not r:
        return None

    def total(part):
        return None if part is None else Tensor._wrap(
            part.reshape(shape).astype(arrays[1].dtype))  # (an owning array .grad can take)
    return Tensor._wrap(r[0]), total(r[1]), total(r[2])


def _norm_backward(g, input, weight, k, eps, rms, want_bias):
    """The same gradients in ember ops (differentiable: double backward runs through here)."""
    dims = tuple(range(-k, 0))
    if rms:
        mean = 0
        rstd = ((input * input).mean(dims, keepdim=True) + eps).rsqrt()
    else:
        mean = input.mean(dims, keepdim=True)
        rstd = (input.var(dims, keepdim=True, correction=0) + eps).rsqrt()
    xhat = (input - mean) * rstd
    gh = g * weight if weight is not None else g
    inner = gh - xhat * (gh * xhat).mean(dims, keepdim=True)
    gx = rstd * (inner if rms else inner - gh.mean(dims, keepdim=True))
    lead = tuple(range(g.dim() - k))

    def total(t):
        return t.sum(lead) if lead else t
    return (gx, total(g * xhat) if weight is not None else None, total(g) if want_bias else None)


@op("layer_norm", tags=("autocast_fp32_cuda",), method=False, function=False)
def layer_norm(xp, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalize over the last ``len(normalized_shape)`` dims to mean 0 and variance 1 (biased),
    then scale by ``weight`` and shift by ``bias``."""
    k, n = _norm_rows("layer_norm", input, normalized_shape)
    y = _norm_kernel(xp, input, weight, bias, n, eps, 0)
    if y is not None:
        return y
    x, dims = _wide(input), tuple(range(-k, 0))
    y = (x - x.mean(axis=dims, keepdims=True)) / xp.sqrt(x.var(axis=dims, keepdims=True) + eps)
    if weight is not None:
        y = y * _wide(weight)
    if bias is not None:
        y = y + _wide(bias)
    return y.astype(input.dtype, copy=False)


@layer_norm.vjp(save=("input", "weight"))
def _(g, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    k, _ = _norm_rows("layer_norm", input, normalized_shape)
    grads = _norm_backward_kernel(g, input, weight, k, eps, 0, bias is not None) or \
        _norm_backward(g, input, weight, k, eps, 0, bias is not None)
    return grads[0], None, grads[1], grads[2], None


def _rms_eps(dtype, eps):
    return ember.finfo(dtype).eps if eps is None else eps


@op("rms_norm", tags=("autocast_fp32_cuda",), method=False, function=False)
def rms_norm(xp, input, normalized_shape, weight=None, eps=None):
    """Divide by the root mean square over the last ``len(normalized_shape)`` dims (plus
    ``eps``, by default the dtype's machine epsilon), then scale by ``weight``."""
    k, n = _norm_rows("rms_norm", input, normalized_shape)
    eps = _rms_eps(Tensor._dtype_of(input), eps)
    y = _norm_kernel(xp, input, weight, None, n, eps, 1)
    if y is not None:
        return y
    x = _wide(input)
    y = x / xp.sqrt((x * x).mean(axis=tuple(range(-k, 0)), keepdims=True) + eps)
    return (y * _wide(weight) if weight is not None else y).astype(input.dtype, copy=False)


@rms_norm.vjp(save=("input", "weight"))
def _(g, input, normalized_shape, weight=None, eps=None):
    k, _ = _norm_rows("rms_norm", input, normalized_shape)
    eps = _rms_eps(input.dtype, eps)
    grads = _norm_backward_kernel(g, input, weight, k, eps, 1, False) or \
        _norm_backward(g, input, weight, k, eps, 1, False)
    return grads[0], None, grads[1], None


def _norm_samples(with_bias):
    def samples(dev, dt):
        if dt.category != 2:
            return []
        def b(n):
            return (make((n,), dt, seed=2),) if with_bias else ()
        return [Sample(make((3, 4), dt), (4,), make((4,), dt, seed=1), *b(4)),
                Sample(make((2, 3, 4), dt), (3, 4)),
                Sample(make((2, 3, 5), dt, noncontig=True), [5], make((5,), dt, seed=1)),
                Sample(make((5,), dt), (5,), make((5,), dt, seed=1), *b(5), 1e-3)]
    return samples


layer_norm.meta = rms_norm.meta = same_meta
layer_norm.samples = _norm_samples(True)
rms_norm.samples = _norm_samples(False)
layer_norm.errors = [ErrorSample(Sample(const(3, 4), (3,)), RuntimeError,
                                 r"layer_norm: input shape \[3, 4\] does not end with")]
layer_norm.torch_fn = "nn.functional.layer_norm"
layer_norm.grad_name = "NativeLayerNormBackward0"
rms_norm.torch_fn = "nn.functional.rms_norm"
# (torch's rms_norm is composed: its last op a multiply, or a contiguous copy)
rms_norm.grad_name_of = lambda input, *_: \
    "MulBackward0" if input.is_contiguous() else "CloneBackward0"


# ---- cross_entropy over class indices: log_softmax + nll_loss fused ------------------------

def _ce_kernel_args(input, target, ignore_index):
    """The C kernel and contiguous (logits, targets) when the fused kernel applies: (N, C)
    logits of float32/64 with (N,) int64 targets; else None (the reference path). The kernel
    checks the targets: it returns -1 for one out of range, and the reference path raises."""
    if input.ndim != 2 or target.shape != input.shape[:1] or target.dtype != _I64:
        return None
    # (kernel()'s cache read inline, contiguous arrays as they are: a small call's cost)
    fn = not _C._off and (_C._fast.get(("cross_entropy", input.dtype.char)) or _C.kernel(
        "cross_entropy", input.dtype))
    if not fn or not input.size:
        return None
    return fn, input if input.flags.c_contiguous else _C.contiguous(input), \
        target if target.flags.c_contiguous else _C.contiguous(target)


def _ce_reference(xp, input, target, ignore_index, reduction, label_smoothing=0.0):
    dim = 1 if input.ndim > 1 else 0
    logp = log_softmax.fwd(xp, input, dim)
    nll = nll_loss.fwd(xp, logp, target, None, ignore_index, reduction)
    if not label_smoothing:
        return nll
    valid = target != ignore_index
    smooth = -logp.sum(axis=dim) * valid
    if reduction != "none":
        smooth = smooth.sum() if reduction == "sum" else \
            smooth.sum() / valid.sum().astype(input.dtype)
    return (1 - label_smoothing) * nll + label_smoothing / input.shape[dim] * smooth


@op("cross_entropy_loss", tags=("autocast_fp32",), method=False, function=False)
def cross_entropy_loss(xp, input, target, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """Cross entropy of logits ``input`` ((N, C), (N, C, d1, ...) or (C,)) against class
    indices ``target``: ``nll_loss(log_softmax(input, 1), target)``, with ``label_smoothing``
    ``eps`` mixing in ``eps / C`` of the mean of ``-log_softmax`` over the classes; fused on the
    cpu (without smoothing) and on a GPU (``ember/cuda/_kernels.py``)."""
    if xp is not np:
        from ..cuda import _kernels as cuda_kernels
        loss = cuda_kernels.cross_entropy(input, target, ignore_index, reduction, label_smoothing)
        if loss is not None:
            return loss
    fused = _ce_kernel_args(input, target, ignore_index) if xp is np and \
        not label_smoothing else None
    if fused is None:
        return _ce_reference(xp, input, target, ignore_index, reduction, label_smoothing)
    fn, x, t = fused
    m = x.shape[0]
    out = np.empty(m + 2, x.dtype)      # (the losses, their sum and mean)
    if fn(_C.ptr(x), _C.ptr(t), None, _C.ptr(out), m, x.shape[1], ignore_index,
          _C.num_threads()) < 0:
        return _ce_reference(xp, input, target, ignore_index, reduction)
    # (a 0-dim array, not a NumPy scalar: see nll_loss)
    return out[:m] if reduction == "none" else out[..., m + (reduction == "mean")]


@cross_entropy_loss.vjp(save=("input", "target"))
def _(g, input, target, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    if type(input._data) is not np.ndarray:
        from ..cuda import _kernels as cuda_kernels
        gx = cuda_kernels.cross_entropy_backward(g, input, target, ignore_index, reduction,
                                                 label_smoothing)
        if gx is not None:
            return gx, None
    arrays = not label_smoothing and kernel_grads(g, input)
    fused = _ce_kernel_args(arrays[1], target._data, ignore_index) if arrays else None
    if fused is not None:
        fn, x, t = fused
        valid = t != ignore_index
        coef = np.broadcast_to(arrays[0], t.shape) if reduction != "mean" else \
            np.full(t.shape, arrays[0] / x.dtype.type(np.count_nonzero(valid)), x.dtype)
        coef = _C.contiguous(coef)
        gx = np.empty(x.shape, x.dtype)
        if fn(_C.ptr(x), _C.ptr(t), _C.ptr(coef), _C.ptr(gx), x.shape[0],
              x.shape[1], ignore_index, _C.num_threads()) >= 0:
            return Tensor._wrap(gx), None
    # the reference: the backwards of nll_loss and log_softmax, on a recomputed log_softmax
    dim = 1 if input.dim() > 1 else 0
    logp = log_softmax(input, dim)
    glogp = nll_loss.vjp_fn(g, logp, target, None, ignore_index, reduction)[0]
    if label_smoothing:
        # the smoothing term's gradient for log_softmax: -eps / C per class of a counted row
        valid = target != ignore_index
        coef = g / valid.sum().clamp(min=1) if reduction == "mean" else g
        glogp = glogp * (1 - label_smoothing) - (coef * valid).unsqueeze(dim) * (
            label_smoothing / input.shape[dim])
    return log_softmax.vjp_fn(glogp, input, dim, result=logp), None


def _ce_meta(input, target, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    return empty(target.shape if reduction == "none" else (), input.dtype)


cross_entropy_loss.meta = _ce_meta
cross_entropy_loss.samples = lambda dev, dt: [
    Sample(make((4, 3), dt), np.array([0, 2, 1, 2])),
    Sample(make((5, 7), dt, -4, 4), np.array([0, 6, -100, 2, 6]), reduction="sum"),
    Sample(make((5, 7), dt, noncontig=True), np.array([0, 6, 3, 2, 6]), reduction="none"),
    Sample(make((3, 4), dt), np.array([0, 9, 1]), ignore_index=9),
    Sample(make((2, 3, 5), dt), np.random.default_rng(4).integers(0, 3, (2, 5))),
    Sample(make((3,), dt), np.array(1)),
    Sample(make((5, 7), dt), np.array([0, 6, -100, 2, 6]), label_smoothing=0.2),
    Sample(make((5, 7), dt), np.array([0, 6, -100, 2, 6]), reduction="none",
           label_smoothing=0.1),
    Sample(make((2, 3, 5), dt), np.random.default_rng(4).integers(0, 3, (2, 5)),
           reduction="sum", label_smoothing=0.3),
] if dt.category == 2 else []
cross_entropy_loss.errors = [ErrorSample(Sample(const(2, 3), np.array([0, 3])),
                                         IndexError, "Target 3 is out of bounds")]
cross_entropy_loss.torch_fn = "nn.functional.cross_entropy"
# torch's node is nll_loss's (after log_softmax's: here fused in one node); with label
# smoothing, the add of its two terms
cross_entropy_loss.grad_name_of = lambda input, target, ignore_index=-100, \
    reduction="mean", label_smoothing=0.0: \
    "AddBackward0" if label_smoothing else nll_node(input, reduction)


# ---- forward mode (tangents.py) ----------------------------------------------------------


def _layer_norm_jvp(a, t, out, centre=True):
    x, k = a["input"], len(a["normalized_shape"])
    eps = a["eps"] if centre else _rms_eps(x.dtype, a["eps"])
    xh, txh = normalized(x, t["input"], tuple(range(-k, 0)), eps, centre)
    return affine(xh, txh, t, a.get("weight"), a.get("bias"))


layer_norm.jvp = decomposed(_layer_norm_jvp)
rms_norm.jvp = decomposed(lambda a, t, out: _layer_norm_jvp(a, t, out, centre=False))
# (with reduction='none' each example's losses are its row's over the class dim)
cross_entropy_loss.jvp = reduction(lambda a: ((1,) if a["reduction"] == "none" and
                                              a["input"].dim() > 1 else None, False))
