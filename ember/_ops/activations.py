"""Activation ops torch computes in one kernel, so their backward is one node: silu, mish,
leaky_relu, elu, celu, hardtanh, hardsigmoid, hardswish, softplus, logsigmoid, hardshrink,
softshrink, threshold. (gelu, with its C kernel, is in nn_rows.py.)"""
import numpy as np

import ember

from .._C import kernels as _C
from .._tensor import Tensor
from .pointwise import fused_grad
from .meta import same_meta
from .pointwise_binary import _limit
from .pointwise_math import threshold_backward
from .registry import op
from .samples import Sample, make


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
    return _limit(xp, input, min_val, max_val) if r is None else r


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
