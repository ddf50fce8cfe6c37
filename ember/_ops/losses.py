"""Loss ops torch computes in one kernel, so their backward is one node: nll_loss, mse_loss,
smooth_l1_loss, huber_loss, binary_cross_entropy[_with_logits]. (cross_entropy_loss, with its
C kernel, is in nn_rows.py.)"""
import math

import numpy as np

import ember

from .._C import kernels as _C
from .indexing import _capturing
from .._tensor import Tensor
from ..autograd.grad_mode import state as _grad_state
from ..autograd.graph import needs_input_grad
from .meta import broadcast_meta, empty
from .tangents import linear_with, loss
from .registry import op
from .samples import Sample, make
from .nn import kernel_grads

_I64 = np.dtype(np.int64)


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
        # (an array, not a NumPy scalar: the C dispatch wraps it without _finish's Python)
        return r[:n].reshape(target.shape) if reduction == "none" else np.asarray(
            r[n] if reduction == "sum" else r[n] / r[n + 1])
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
    # (kernel()'s cache read inline and no re-copy of contiguous arrays: a small call's cost)
    fn = (_C._fast.get(("nll", x.dtype.char)) or _C.kernel("nll", x.dtype)) if xp is np and \
        not _C._off and type(x) is np.ndarray and x.size and t.dtype == _I64 and (
            weight is None or weight.dtype == x.dtype) else None
    if not fn:
        return None
    out, n, c = np.empty(t.size + 2, x.dtype), x.shape[0], x.shape[1]
    if not (x.flags.c_contiguous and t.flags.c_contiguous):
        x, t = _C.contiguous(x), _C.contiguous(t)
    return out if fn(_C.ptr(x), _C.ptr(t), weight if weight is None else _C.ptr(_C.contiguous(
        weight)), _C.ptr(out), n, c, x.size // (n * c or 1), ignore_index) == 0 else None


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


# ---- forward mode (tangents.py) ----------------------------------------------------------

for _d in (binary_cross_entropy, binary_cross_entropy_with_logits, huber_loss, mse_loss,
           smooth_l1_loss):
    _d.jvp = loss
nll_loss.jvp = linear_with(fixed=("weight",))
