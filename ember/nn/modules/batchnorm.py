"""Normalization over batch, instance and channel groups: BatchNorm1d/2d/3d,
InstanceNorm1d/2d/3d, GroupNorm, LocalResponseNorm. Buffer names and shapes are torch's, so
state_dicts load both ways."""
from ..._ops.creation import ones, tensor, zeros
from ... import _dtype
from .. import functional as F
from .module import Module
from .normalization import register_affine, reset_affine


class _NormBase(Module):
    """Affine weight/bias and the running statistics buffers shared by batch and instance norm.
    """

    _version = 2
    nd = 2      # spatial dims of the batched input

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, device=None, dtype=None, *, bias=True):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        factory = dict(device=device, dtype=dtype)
        register_affine(self, (num_features,), affine, bias, device, dtype)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, **factory))
            self.register_buffer("running_var", ones(num_features, **factory))
            self.register_buffer("num_batches_tracked",
                                 tensor(0, dtype=_dtype.int64, device=device))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)
        self.reset_parameters()

    def reset_running_stats(self):
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def reset_parameters(self):
        self.reset_running_stats()
        reset_affine(self)

    def _check_input_dim(self, input):
        dims = (2, 3) if self.nd == 0 else (self.nd + 2,)      # BatchNorm1d: (N, C) or (N, C, L)
        if input.dim() not in dims:
            want = " or ".join(f"{d}D" for d in dims)
            raise ValueError(f"expected {want} input (got {input.dim()}D input)")

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, bias={self.bias is not None}, "
                f"track_running_stats={self.track_running_stats}")


class _BatchNorm(_NormBase):
    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:         # cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked.item())
        # batch statistics in training, and in eval when there are no running stats
        use_batch = self.training or (self.running_mean is None and self.running_var is None)
        keep = not self.training or self.track_running_stats
        return F.batch_norm(input, self.running_mean if keep else None,
                            self.running_var if keep else None, self.weight, self.bias,
                            use_batch, factor, self.eps)


class BatchNorm1d(_BatchNorm):
    """Batch normalization of (N, C) or (N, C, L) input per channel.

    Example:
        >>> import ember
        >>> ember.nn.BatchNorm1d(4)
        BatchNorm1d(4, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)
    """

    nd = 0


class BatchNorm2d(_BatchNorm):
    r"""Batch normalization of (N, C, H, W) input per channel:
    ``y = (x - mean) / sqrt(var + eps) * weight + bias``.

    Args:
        num_features (int): C.
        eps (float): added to the variance. Default: 1e-5.
        momentum (float or None): running-stat update factor; None for a cumulative average.
            Default: 0.1.
        affine (bool): learn weight (init 1) and bias (init 0). Default: True.
        track_running_stats (bool): keep running_mean/var (used in eval). Default: True.

    Shape:
        Input and output (N, C, H, W).

    Example:
        >>> import ember
        >>> m = ember.nn.BatchNorm2d(3)
        >>> y = m(ember.randn(4, 3, 5, 5))
        >>> [round(v, 4) for v in y.mean((0, 2, 3)).abs().tolist()], int(m.num_batches_tracked)
        ([0.0, 0.0, 0.0], 1)
    """

    nd = 2


class BatchNorm3d(_BatchNorm):
    """Batch normalization of (N, C, D, H, W) input per channel; see :class:`BatchNorm2d`."""

    nd = 3


class _InstanceNorm(_NormBase):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False,
                 track_running_stats=False, device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype)

    def _check_input_dim(self, input):
        if input.dim() not in (self.nd + 1, self.nd + 2):
            raise ValueError(f"expected {self.nd + 1}D or {self.nd + 2}D input (got "
                             f"{input.dim()}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        channel = input.dim() - self.nd - 1
        if input.shape[channel] != self.num_features and self.affine:
            raise ValueError(f"expected input's size at dim={channel} to match num_features "
                             f"({self.num_features}), but got: {input.shape[channel]}.")
        batched = input.dim() == self.nd + 2
        x = input if batched else input.unsqueeze(0)
        out = F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                              self.training or not self.track_running_stats,
                              self.momentum if self.momentum is not None else 0.0, self.eps)
        return out if batched else out.squeeze(0)


class InstanceNorm1d(_InstanceNorm):
    """Instance normalization of (N, C, L) or (C, L): each channel of each sample over L."""

    nd = 1


class InstanceNorm2d(_InstanceNorm):
    """Instance normalization of (N, C, H, W) or (C, H, W); no affine, no running stats by
    default.

    Example:
        >>> import ember
        >>> ember.nn.InstanceNorm2d(3)
        InstanceNorm2d(3, eps=1e-05, momentum=0.1, affine=False, bias=False,
                       track_running_stats=False)
    """

    nd = 2


class InstanceNorm3d(_InstanceNorm):
    """Instance normalization of (N, C, D, H, W) or (C, D, H, W)."""

    nd = 3


class GroupNorm(Module):
    """Normalize ``num_groups`` groups of channels, then a per-channel affine (1, 0 at init).

    Example:
        >>> import ember
        >>> m = ember.nn.GroupNorm(2, 6)
        >>> m
        GroupNorm(2, 6, eps=1e-05, affine=True, bias=True)
        >>> m(ember.randn(3, 6, 4)).shape
        torch.Size([3, 6, 4])
    """

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None,
                 dtype=None, *, bias=True):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups "
                             f"({num_groups})")
        self.num_groups, self.num_channels, self.eps, self.affine = (num_groups, num_channels,
                                                                     eps, affine)
        register_affine(self, (num_channels,), affine, bias, device, dtype)
        self.reset_parameters()

    def reset_parameters(self):
        reset_affine(self)

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class LocalResponseNorm(Module):
    """Normalize each value by its ``size`` neighbouring channels (see nn.functional).

    Example:
        >>> import ember
        >>> ember.nn.LocalResponseNorm(2)
        LocalResponseNorm(2, alpha=0.0001, beta=0.75, k=1.0)
    """

    def __init__(self, size, alpha=1e-4, beta=0.75, k=1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input):
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self):
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"
