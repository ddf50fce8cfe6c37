"""torch's native normalization kernels, one node each: native_batch_norm and
native_group_norm (whose rows run layer_norm's C kernel, nn_rows.py), with their forward-mode
rules."""
import numpy as np

from .._C import kernels as _C
from .._tensor import Tensor
from ..autograd.graph import needs_input_grad
from .meta import empty, same_meta
from .tangents import affine, decomposed, fallback_unless, normalized
from .registry import op
from .samples import Sample, make
from .nn import kernel_grads
from .nn_rows import _norm_bwd_arrays, _norm_kernel


# ---- batch_norm: torch's native kernel, one node --------------------------------------------

@op("native_batch_norm", nondiff_outputs=(1, 2), method=False, function=False)
def native_batch_norm(xp, input, weight, bias, running_mean, running_var, training, eps):
    """Normalize each channel of (N, C, *) ``input`` by its batch statistics (``training``) or
    the running ones, then scale and shift: ``(output, mean, biased variance)`` used."""
    x = input.astype(np.float32) if input.dtype.itemsize < 4 else input   # (torch's opmath)
    if xp is np and (r := _bn_c(x, None, weight, bias, running_mean, running_var, training,
                                eps)):
        return tuple(a.astype(input.dtype, copy=False) for a in (r[0], r[1][0], r[1][1]))
    dims, shape = (0,) + tuple(range(2, x.ndim)), (1, -1) + (1,) * (x.ndim - 2)
    mean, var = (_moments(x, dims, shape)[:2] if xp is np else (x.mean(axis=dims), x.var(
        axis=dims))) if training else (running_mean, running_var)
    out = (x - mean.reshape(shape)) * (1 / xp.sqrt(var.reshape(shape) + eps))
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out.astype(input.dtype, copy=False), mean.astype(input.dtype), var.astype(input.dtype)


def _bn_c(x, g, w, b, mean, var, training, eps):
    """(the output, or with ``g`` the input's gradient; the (4, C) mean, variance, sums of
    g xhat and of g) by rowops.h's batch_norm, channels over threads, in two passes where
    NumPy makes ~8 on one; None where it does not apply (channels of under 8 positions)."""
    s = x.size // max(1, x.shape[0] * x.shape[1]) if x.ndim > 2 else 0
    if s < 8 or (fn := _C.kernel("batch_norm", x.dtype)) is None:
        return None
    st = np.zeros((4, x.shape[1]), x.dtype)
    if not training:
        st[0], st[1] = mean, var
    x, g, w, b = (a if a is None else _C.contiguous(a, x.dtype) for a in (x, g, w, b))
    y = np.empty(x.shape, x.dtype)
    fn(_C.ptr(x), _C.ptr(g), _C.ptr(y), _C.ptr(w), _C.ptr(b), _C.ptr(st), x.shape[0],
       x.shape[1], s, eps, int(training), _C.num_threads())
    return y, st


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
        if r := _bn_c(x, g, w, None, arrays[-2], arrays[-1], training, eps):
            return (Tensor._wrap(r[0]), *(Tensor._wrap(r[1][i]) if needs_input_grad(i - 1)
                                          else None for i in (2, 3))) + (None,) * 4
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


native_batch_norm.jvp = fallback_unless(
    lambda a: a["training"] or not any(isinstance(a[k], Tensor) and a[k].requires_grad
                                       for k in ("running_mean", "running_var")),
    decomposed(_batch_norm_jvp))
native_group_norm.jvp = decomposed(_group_norm_jvp)
