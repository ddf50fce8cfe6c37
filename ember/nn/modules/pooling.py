"""Pooling, padding, resampling and block (fold/unfold) layers. Each is a thin holder of its
options around the function of the same name in nn.functional; constructor arguments, stored
attributes and repr are torch's."""
from .. import functional as F
from .._conv_functional import _ntuple
from .module import Module


class _MaxPoolNd(Module):
    nd = 2

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, input):
        return getattr(F, f"max_pool{self.nd}d")(input, self.kernel_size, self.stride,
                                                 self.padding, self.dilation,
                                                 ceil_mode=self.ceil_mode,
                                                 return_indices=self.return_indices)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"
                f", dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPoolNd):
    """1-d max pooling; see :class:`MaxPool2d`."""

    nd = 1


class MaxPool2d(_MaxPoolNd):
    """2-d max pooling over (N, C, H, W) windows (padding counts as -inf).

    Example:
        >>> import ember
        >>> m = ember.nn.MaxPool2d(3, stride=2)
        >>> m
        MaxPool2d(kernel_size=3, stride=2, padding=0, dilation=1, ceil_mode=False)
        >>> m(ember.randn(1, 4, 9, 9)).shape
        torch.Size([1, 4, 4, 4])
    """

    nd = 2


class MaxPool3d(_MaxPoolNd):
    """3-d max pooling; see :class:`MaxPool2d`."""

    nd = 3


class _MaxUnpoolNd(Module):
    nd = 2

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size = _ntuple(kernel_size, self.nd)
        self.stride = _ntuple(stride if stride is not None else kernel_size, self.nd)
        self.padding = _ntuple(padding, self.nd)

    def forward(self, input, indices, output_size=None):
        return getattr(F, f"max_unpool{self.nd}d")(input, indices, self.kernel_size,
                                                   self.stride, self.padding, output_size)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    """Partial inverse of :class:`MaxPool1d`."""

    nd = 1


class MaxUnpool2d(_MaxUnpoolNd):
    """Partial inverse of :class:`MaxPool2d`: maxima go back to their indices, zeros elsewhere.

    Example:
        >>> import ember
        >>> pool, unpool = ember.nn.MaxPool2d(2, return_indices=True), ember.nn.MaxUnpool2d(2)
        >>> unpool(*pool(ember.randn(1, 1, 4, 4))).shape
        torch.Size([1, 1, 4, 4])
    """

    nd = 2


class MaxUnpool3d(_MaxUnpoolNd):
    """Partial inverse of :class:`MaxPool3d`."""

    nd = 3


class _AvgPoolNd(Module):
    nd = 2

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
        super().__init__()
        tup = (lambda v: _ntuple(v, 1)) if self.nd == 1 else (lambda v: v)
        self.kernel_size = tup(kernel_size)
        self.stride = tup(stride if stride is not None else kernel_size)
        self.padding = tup(padding)
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad
        if self.nd != 1:
            self.divisor_override = divisor_override

    def forward(self, input):
        args = (input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                self.count_include_pad)
        if self.nd != 1:
            args += (self.divisor_override,)
        return getattr(F, f"avg_pool{self.nd}d")(*args)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(_AvgPoolNd):
    """1-d average pooling; see :class:`AvgPool2d`."""

    nd = 1


class AvgPool2d(_AvgPoolNd):
    """2-d average pooling (``count_include_pad``, ``divisor_override`` as in torch).

    Example:
        >>> import ember
        >>> ember.nn.AvgPool2d(2)(ember.ones(1, 1, 4, 4))
        tensor([[[[1., 1.],
                  [1., 1.]]]])
    """

    nd = 2


class AvgPool3d(_AvgPoolNd):
    """3-d average pooling; see :class:`AvgPool2d`."""

    nd = 3


class _LPPoolNd(Module):
    nd = 2

    def __init__(self, norm_type, kernel_size, stride=None, ceil_mode=False):
        super().__init__()
        self.norm_type, self.kernel_size = norm_type, kernel_size
        self.stride, self.ceil_mode = stride, ceil_mode

    def forward(self, input):
        return getattr(F, f"lp_pool{self.nd}d")(input, float(self.norm_type), self.kernel_size,
                                                self.stride, self.ceil_mode)

    def extra_repr(self):
        return (f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, ceil_mode={self.ceil_mode}")


class LPPool1d(_LPPoolNd):
    """1-d power-average pooling."""

    nd = 1


class LPPool2d(_LPPoolNd):
    """2-d power-average pooling: ``(sum over window of x^p)^(1/p)``.

    Example:
        >>> import ember
        >>> ember.nn.LPPool2d(2, 2)(ember.ones(1, 1, 2, 2))
        tensor([[[[2.]]]])
    """

    nd = 2


class LPPool3d(_LPPoolNd):
    """3-d power-average pooling."""

    nd = 3


class _AdaptivePoolNd(Module):
    nd, kind = 2, "avg"

    def __init__(self, output_size, return_indices=False):
        super().__init__()
        self.output_size = output_size
        if self.kind == "max":
            self.return_indices = return_indices

    def forward(self, input):
        fn = getattr(F, f"adaptive_{self.kind}_pool{self.nd}d")
        if self.kind == "max":
            return fn(input, self.output_size, self.return_indices)
        return fn(input, self.output_size)

    def extra_repr(self):
        return f"output_size={self.output_size}"


def _adaptive(kind, nd):
    doc = f"""Adaptive {kind} pooling over {nd} dims to ``output_size`` (None keeps a dim).

    Example:
        >>> import ember
        >>> m = ember.nn.Adaptive{kind.capitalize()}Pool{nd}d(1)
        >>> m(ember.ones({", ".join(["1", "2"] + ["3"] * nd)})).shape
        torch.Size({[1, 2] + [1] * nd})
    """
    return type(f"Adaptive{kind.capitalize()}Pool{nd}d", (_AdaptivePoolNd,),
                {"nd": nd, "kind": kind, "__doc__": doc, "__module__": __name__})


AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d = (_adaptive("avg", n) for n in (1, 2, 3))
AdaptiveMaxPool1d, AdaptiveMaxPool2d, AdaptiveMaxPool3d = (_adaptive("max", n) for n in (1, 2, 3))


# ---- padding ---------------------------------------------------------------------------------

class _PadNd(Module):
    nd, mode = 2, "constant"

    def __init__(self, padding, value=None):
        super().__init__()
        self.padding = _ntuple(padding, 2 * self.nd)
        if self.mode == "constant":
            self.value = value

    def forward(self, input):
        return F.pad(input, self.padding, self.mode, getattr(self, "value", None))

    def extra_repr(self):
        if self.mode == "constant" and not isinstance(self, (ZeroPad1d, ZeroPad2d, ZeroPad3d)):
            return f"padding={self.padding}, value={self.value}"
        return f"{self.padding}"


class _ConstantPadNd(_PadNd):
    def __init__(self, padding, value):
        super().__init__(padding, value)


class ConstantPad1d(_ConstantPadNd):
    """Pad the last dim with ``value``; ``padding`` is an int or (left, right)."""

    nd = 1


class ConstantPad2d(_ConstantPadNd):
    """Pad the last 2 dims with ``value``; ``padding`` is an int or (left, right, top, bottom).

    Example:
        >>> import ember
        >>> ember.nn.ConstantPad2d((1, 0, 0, 1), 7.)(ember.zeros(1, 1, 1, 1))
        tensor([[[[7., 0.],
                  [7., 7.]]]])
    """

    nd = 2


class ConstantPad3d(_ConstantPadNd):
    """Pad the last 3 dims with ``value``."""

    nd = 3


class _ZeroPadNd(_PadNd):
    def __init__(self, padding):
        super().__init__(padding, 0.0)


class ZeroPad1d(_ZeroPadNd):
    """Pad the last dim with zeros."""

    nd = 1


class ZeroPad2d(_ZeroPadNd):
    """Pad the last 2 dims with zeros; ``padding`` is an int or (left, right, top, bottom).

    Example:
        >>> import ember
        >>> ember.nn.ZeroPad2d(1)(ember.ones(1, 1, 2, 2)).shape
        torch.Size([1, 1, 4, 4])
    """

    nd = 2


class ZeroPad3d(_ZeroPadNd):
    """Pad the last 3 dims with zeros."""

    nd = 3


def _pad_class(name, mode, nd):
    doc = f"""Pad the last {nd} dim(s) in ``{mode}`` mode (see nn.functional.pad).

    Example:
        >>> import ember
        >>> ember.nn.{name}(1)(ember.ones({", ".join(["1", "1"] + ["3"] * nd)})).shape
        torch.Size({[1, 1] + [5] * nd})
    """
    return type(name, (_PadNd,), {"nd": nd, "mode": mode, "__doc__": doc,
                                  "__module__": __name__})


ReflectionPad1d, ReflectionPad2d, ReflectionPad3d = (
    _pad_class(f"ReflectionPad{n}d", "reflect", n) for n in (1, 2, 3))
ReplicationPad1d, ReplicationPad2d, ReplicationPad3d = (
    _pad_class(f"ReplicationPad{n}d", "replicate", n) for n in (1, 2, 3))
CircularPad1d, CircularPad2d, CircularPad3d = (
    _pad_class(f"CircularPad{n}d", "circular", n) for n in (1, 2, 3))


# ---- resampling and blocks -----------------------------------------------------------------

class Upsample(Module):
    """Resize by ``size`` or ``scale_factor`` (see nn.functional.interpolate).

    Example:
        >>> import ember
        >>> m = ember.nn.Upsample(scale_factor=2, mode="bilinear")
        >>> m
        Upsample(scale_factor=2.0, mode='bilinear')
        >>> m(ember.ones(1, 1, 2, 2)).shape
        torch.Size([1, 1, 4, 4])
    """

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None):
        super().__init__()
        self.name = type(self).__name__
        self.size = size
        self.scale_factor = (tuple(float(f) for f in scale_factor) if isinstance(
            scale_factor, tuple) else float(scale_factor) if scale_factor else None)
        self.mode, self.align_corners = mode, align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, input):
        return F.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                             recompute_scale_factor=self.recompute_scale_factor)

    def extra_repr(self):
        info = f"scale_factor={self.scale_factor!r}" if self.scale_factor is not None else \
            f"size={self.size!r}"
        return info + f", mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    """:class:`Upsample` in nearest mode."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """:class:`Upsample` in bilinear mode with ``align_corners=True``."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


class PixelShuffle(Module):
    """(*, C r^2, H, W) -> (*, C, H r, W r).

    Example:
        >>> import ember
        >>> ember.nn.PixelShuffle(3)(ember.ones(1, 9, 4, 4)).shape
        torch.Size([1, 1, 12, 12])
    """

    def __init__(self, upscale_factor):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input):
        return F.pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self):
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """(*, C, H r, W r) -> (*, C r^2, H, W).

    Example:
        >>> import ember
        >>> ember.nn.PixelUnshuffle(2)(ember.ones(1, 1, 4, 4)).shape
        torch.Size([1, 4, 2, 2])
    """

    def __init__(self, downscale_factor):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input):
        return F.pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self):
        return f"downscale_factor={self.downscale_factor}"


class ChannelShuffle(Module):
    """Interleaves the channels of ``groups`` groups (see ``nn.functional.channel_shuffle``).

    Example:
        >>> import ember
        >>> ember.nn.ChannelShuffle(2)(ember.arange(4.0).reshape(1, 4, 1)).flatten()
        tensor([0., 2., 1., 3.])
    """

    def __init__(self, groups):
        super().__init__()
        self.groups = groups

    def forward(self, input):
        return F.channel_shuffle(input, self.groups)

    def extra_repr(self):
        return f"groups={self.groups}"


class _FractionalMaxPoolNd(Module):
    nd = 2

    def __init__(self, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                 _random_samples=None):
        super().__init__()
        name = type(self).__name__
        self.kernel_size, self.return_indices = _ntuple(kernel_size, self.nd), return_indices
        self.register_buffer("_random_samples", _random_samples)
        self.output_size = _ntuple(output_size, self.nd) if output_size is not None else None
        # (ratios are floats: torch's _pair repeats a number, keeps a tuple)
        self.output_ratio = None if output_ratio is None else tuple(output_ratio) if \
            isinstance(output_ratio, (tuple, list)) else (output_ratio,) * self.nd
        if output_size is None and output_ratio is None:
            raise ValueError(f"{name} requires specifying either an output size, or a pooling "
                             "ratio")
        if output_size is not None and output_ratio is not None:
            raise ValueError("only one of output_size and output_ratio may be specified")
        if self.output_ratio is not None and not all(0 < r < 1 for r in self.output_ratio):
            raise ValueError(f"output_ratio must be between 0 and 1 (got {output_ratio})")

    def forward(self, input):
        fn = F.fractional_max_pool2d if self.nd == 2 else F.fractional_max_pool3d
        return fn(input, self.kernel_size, self.output_size, self.output_ratio,
                  self.return_indices, _random_samples=self._random_samples)


class FractionalMaxPool2d(_FractionalMaxPoolNd):
    """Max pooling over pseudo-random windows to ``output_size`` or ``output_ratio`` of the
    input (Graham, 2014); ``_random_samples`` fixes the windows.

    Example:
        >>> import ember
        >>> ember.nn.FractionalMaxPool2d(2, output_size=3)(ember.ones(1, 1, 6, 6)).shape
        torch.Size([1, 1, 3, 3])
    """


class FractionalMaxPool3d(_FractionalMaxPoolNd):
    """The 3-D :class:`FractionalMaxPool2d`."""
    nd = 3


class Unfold(Module):
    """Sliding blocks of (N, C, H, W) as columns (N, C * kH * kW, L); see nn.functional.unfold.

    Example:
        >>> import ember
        >>> ember.nn.Unfold(2)(ember.ones(1, 3, 4, 4)).shape
        torch.Size([1, 12, 9])
    """

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation = kernel_size, dilation
        self.padding, self.stride = padding, stride

    def forward(self, input):
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")


class Fold(Module):
    """Sum columns (N, C * kH * kW, L) back into (N, C, *output_size); see nn.functional.fold.

    Example:
        >>> import ember
        >>> ember.nn.Fold((4, 4), 2)(ember.ones(1, 12, 9)).shape
        torch.Size([1, 3, 4, 4])
    """

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input):
        return F.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding,
                      self.stride)

    def extra_repr(self):
        return (f"output_size={self.output_size}, kernel_size={self.kernel_size}, "
                f"dilation={self.dilation}, padding={self.padding}, stride={self.stride}")
