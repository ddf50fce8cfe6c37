"""Parameter initialisation, like ``torch.nn.init``. Every function fills in place under
no_grad and returns the tensor."""
import math
import warnings

from ..autograd.grad_mode import no_grad


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for ``nonlinearity`` (torch's table)."""
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d", "sigmoid")
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor):
    if tensor.dim() < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 "
                         "dimensions")
    receptive = 1
    for s in tensor.shape[2:]:
        receptive *= s
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _fan(tensor, mode):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    with no_grad():
        return tensor.uniform_(a, b, generator=generator)


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    with no_grad():
        return tensor.normal_(mean, std, generator=generator)


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """N(mean, std) truncated to [a, b], drawn as torch 2.13 does (the same numbers for the
    same seed): normal samples redrawn where outside when [a, b] holds over 30% of the mass,
    else uniform proposals on [a, b] accepted by ``log(u) <= log pdf`` relative to its peak.

    Example:
        >>> w = ember.nn.init.trunc_normal_(ember.empty(100), std=3.0, a=-1.0, b=1.0)
        >>> bool((w.abs() <= 1).all())
        True
    """
    import ember
    if tensor.device.type == "meta":
        return tensor

    def cdf(x):
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0
    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. The "
                      "distribution of values may be incorrect.", stacklevel=2)
    with no_grad():
        if cdf((b - mean) / std) - cdf((a - mean) / std) > 0.3:
            lo, hi = (tensor.new_tensor(v, device="cpu").item() for v in (a, b))
            result = tensor.normal_(mean, std, generator=generator)
            while (mask := (result < lo) | (result > hi)).any():
                result = ember.where(mask, ember.empty_like(result).normal_(
                    mean, std, generator=generator), result)
            return tensor if result is tensor else tensor.copy_(result)
        log_peak = -0.5 * ((max(a, min(mean, b)) - mean) / std) ** 2

        def rejected(c):        # u's log above the proposal's log density: draw it again
            logp = c.sub(mean).div_(std).pow_(2).mul_(-0.5).sub_(log_peak)
            return ember.empty_like(tensor).uniform_(generator=generator).log_().gt(logp)
        pending, result = rejected(tensor.uniform_(a, b, generator=generator)), tensor
        while pending.any():
            c = ember.empty_like(tensor).uniform_(a, b, generator=generator)
            result = ember.where(pending, c, result)
            pending = ember.where(pending, rejected(c), pending)
        return tensor if result is tensor else tensor.copy_(result)


def constant_(tensor, val):
    with no_grad():
        return tensor.fill_(val)


def ones_(tensor):
    return constant_(tensor, 1.0)


def zeros_(tensor):
    return constant_(tensor, 0.0)


def eye_(tensor):
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    from .._ops.creation import eye
    with no_grad():
        return tensor.copy_(eye(*tensor.shape, dtype=tensor.dtype, device=tensor.device))


def dirac_(tensor, groups=1):
    from .._ops.creation import zeros
    d = tensor.dim()
    if d not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    out_per = tensor.shape[0] // groups
    z = zeros(tuple(tensor.shape), dtype=tensor.dtype)
    mid = tuple(s // 2 for s in tensor.shape[2:])
    for g in range(groups):
        for i in range(min(out_per, tensor.shape[1])):
            z[(g * out_per + i, i) + mid] = 1
    with no_grad():
        return tensor.copy_(z)


def xavier_uniform_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He initialisation: U(-b, b) with b = gain * sqrt(3 / fan)."""
    if 0 in tensor.shape:
        return tensor
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / _fan(tensor, mode))
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    if 0 in tensor.shape:
        return tensor
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode)),
                   generator)


def orthogonal_(tensor, gain=1, generator=None):
    """A (semi-)orthogonal matrix from the QR decomposition of a normal sample (drawn as
    torch's, so the sample is torch's for the same seed; the QR is NumPy's LAPACK)."""
    import numpy as np
    if tensor.dim() < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0 or tensor.device.type == "meta":
        return tensor
    rows = tensor.shape[0]
    flat = tensor.new_empty((rows, tensor.numel() // rows)).normal_(0, 1, generator=generator)
    flat = flat.numpy().astype(np.float64 if flat.dtype.itemsize == 8 else np.float32)
    flat = flat.T if flat.shape[0] < flat.shape[1] else flat
    q, r = np.linalg.qr(flat)
    q *= np.sign(np.diag(r))
    q = q.T if q.shape[0] != rows else q
    with no_grad():
        return tensor.copy_(tensor.new_tensor(q.reshape(tuple(tensor.shape)))).mul_(gain)


def sparse_(tensor, sparsity, std=0.01, generator=None):
    """N(0, std) with ``ceil(sparsity * rows)`` zeros per column at random rows.

    Example:
        >>> w = ember.nn.init.sparse_(ember.empty(10, 3), 0.3)
        >>> (w == 0).sum(0)
        tensor([3, 3, 3])
    """
    import ember
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    if tensor.device.type == "meta":
        return tensor
    rows, cols = tensor.shape
    with no_grad():
        tensor.normal_(0, std, generator=generator)
        for c in range(cols):
            # NOTE: as torch, the rows come from the default generator, not ``generator``
            tensor[ember.randperm(rows)[:math.ceil(sparsity * rows)], c] = 0
    return tensor


def _deprecated(new):
    old = new[:-1]

    def f(*args, **kwargs):
        warnings.warn(f"`nn.init.{old}` is now deprecated in favor of `nn.init.{new}`.",
                      FutureWarning, stacklevel=2)
        return globals()[new](*args, **kwargs)
    f.__name__ = f.__qualname__ = old
    f.__doc__ = f"Deprecated spelling of :func:`{new}` (warns, then calls it)."
    return f


# torch's old names without the trailing underscore, kept with their FutureWarning
for _new in ("uniform_", "normal_", "constant_", "eye_", "dirac_", "xavier_uniform_",
             "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "sparse_"):
    globals()[_new[:-1]] = _deprecated(_new)
del _new
