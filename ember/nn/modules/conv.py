"""Convolution layers: Conv1d/2d/3d, ConvTranspose1d/2d/3d and their lazy variants.

Each class is ``_ConvNd`` or ``_ConvTransposeNd`` with its number of spatial dims; parameter
shapes, initialization and repr are torch's (see torch.nn.Conv2d).
"""
import math

from ..._ops.creation import empty
from .. import functional as F
from .._conv_functional import _ntuple
from .. import init
from ..parameter import Parameter
from .module import Module, _changed

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


class _ConvNd(Module):
    """Base of the convolution layers: ``nd`` spatial dims, ``transposed`` weights."""

    nd, transposed = 2, False

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None,
                 output_padding=0):
        super().__init__()
        n = self.nd
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError("out_channels must be divisible by groups")
        stride = _ntuple(stride, n)
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                                 "{'valid', 'same'}")
            if padding == "same" and any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {set(_PADDING_MODES)}, but got "
                             f"padding_mode='{padding_mode}'")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride = _ntuple(kernel_size, n), stride
        self.padding = padding if isinstance(padding, str) else _ntuple(padding, n)
        self.dilation = _ntuple(dilation, n)
        self.output_padding = _ntuple(output_padding, n)
        self.groups, self.padding_mode = groups, padding_mode
        shape = (in_channels, out_channels // groups) if self.transposed else \
            (out_channels, in_channels // groups)
        factory = dict(device=device, dtype=dtype)
        self.weight = Parameter(empty(shape + self.kernel_size, **factory))
        self.register_parameter("bias", Parameter(empty(out_channels, **factory)) if bias else None)
        self.reset_parameters()

    def reset_parameters(self):
        # NOTE: kaiming_uniform_(a=sqrt(5)) is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), torch's
        # historical default, kept so that models train as they do under torch.
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def _mode_padding(self):
        """F.pad's list for a non-zeros padding_mode: the (left, right) pairs, last dim first
        ('same' puts the odd cell on the right)."""
        if self.padding == "same":
            total = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size)]
            pairs = [(t // 2, t - t // 2) for t in total]
        elif self.padding == "valid":
            pairs = [(0, 0)] * self.nd
        else:
            pairs = [(p, p) for p in self.padding]
        return [a for pair in reversed(pairs) for a in pair]

    def _conv_forward(self, input, weight, bias):
        conv = getattr(F, f"conv{self.nd}d")
        if self.padding_mode != "zeros":
            return conv(F.pad(input, self._mode_padding(), mode=self.padding_mode), weight,
                        bias, self.stride, 0, self.dilation, self.groups)
        return conv(input, weight, bias, self.stride, self.padding, self.dilation, self.groups)

    def forward(self, input):
        return self._conv_forward(input, self.weight, self.bias)

    def extra_repr(self):
        zeros, ones = (0,) * self.nd, (1,) * self.nd
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}" + _changed(self, dict(
                    padding=zeros, dilation=ones, output_padding=zeros, groups=1)) +
                (", bias=False" if self.bias is None else "") +
                _changed(self, dict(padding_mode="zeros")))


class Conv1d(_ConvNd):
    """1-d convolution over (N, C_in, L); weight (out, in / groups, k). See torch.nn.Conv1d.

    Example:
        >>> import ember
        >>> ember.nn.Conv1d(4, 8, 3, padding=1)(ember.randn(2, 4, 10)).shape
        torch.Size([2, 8, 10])
    """

    nd = 1


class Conv2d(_ConvNd):
    r"""2-d convolution over (N, C_in, H, W).

    Args:
        in_channels, out_channels (int): channels of the input and output.
        kernel_size, stride, padding, dilation (int or tuple): per spatial dim; ``padding``
            may also be ``'valid'`` or ``'same'``.
        groups (int): split the channels into groups convolved separately. Default: 1.
        bias (bool): learn an additive bias. Default: True.
        padding_mode (str): zeros, reflect, replicate or circular. Default: zeros.

    Shape:
        Input (N, C_in, H, W) or (C_in, H, W); output (N, C_out, H_out, W_out).

    Attributes:
        weight: (out_channels, in_channels / groups, kH, kW), init
            U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = in_channels / groups * kH * kW.
        bias: (out_channels,), same distribution.

    Example:
        >>> import ember
        >>> m = ember.nn.Conv2d(3, 16, 3, stride=2, padding=1)
        >>> m
        Conv2d(3, 16, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1))
        >>> m(ember.randn(1, 3, 32, 32)).shape
        torch.Size([1, 16, 16, 16])
    """

    nd = 2


class Conv3d(_ConvNd):
    """3-d convolution over (N, C_in, D, H, W); see :class:`Conv2d`.

    Example:
        >>> import ember
        >>> ember.nn.Conv3d(2, 4, 3)(ember.randn(1, 2, 5, 5, 5)).shape
        torch.Size([1, 4, 3, 3, 3])
    """

    nd = 3


class _ConvTransposeNd(_ConvNd):
    transposed = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device, dtype, output_padding)

    def _output_padding(self, input, output_size):
        """The output_padding that gives ``output_size`` (torch's rule and error)."""
        if output_size is None:
            return self.output_padding
        nd = self.nd
        size = list(output_size)[-nd:] if len(output_size) in (nd + 1, nd + 2) else \
            list(output_size)
        if len(size) != nd:
            raise ValueError(f"ConvTranspose{nd}D: for {input.dim()}D input, output_size must "
                             f"have {nd} or {nd + 2} elements (got {len(output_size)})")
        lo = [(input.shape[input.dim() - nd + d] - 1) * self.stride[d] - 2 * self.padding[d] +
              self.dilation[d] * (self.kernel_size[d] - 1) + 1 for d in range(nd)]
        hi = [a + s - 1 for a, s in zip(lo, self.stride)]
        if any(not a <= s <= b for a, s, b in zip(lo, size, hi)):
            raise ValueError(f"requested an output size of {size}, but valid sizes range from "
                             f"{lo} to {hi} (for an input of {list(input.shape[2:])})")
        return tuple(s - a for s, a in zip(size, lo))

    def forward(self, input, output_size=None):
        conv = getattr(F, f"conv_transpose{self.nd}d")
        return conv(input, self.weight, self.bias, self.stride, self.padding,
                    self._output_padding(input, output_size), self.groups, self.dilation)


class ConvTranspose1d(_ConvTransposeNd):
    """Transposed 1-d convolution; weight (in, out / groups, k). See torch.nn.ConvTranspose1d.

    Example:
        >>> import ember
        >>> ember.nn.ConvTranspose1d(4, 2, 3, stride=2)(ember.randn(1, 4, 5)).shape
        torch.Size([1, 2, 11])
    """

    nd = 1


class ConvTranspose2d(_ConvTransposeNd):
    """Transposed 2-d convolution (a.k.a. fractionally strided); weight
    (in, out / groups, kH, kW). ``forward(input, output_size=None)`` may pick among the output
    sizes a stride allows.

    Example:
        >>> import ember
        >>> m = ember.nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1)
        >>> m(ember.randn(1, 8, 5, 5), output_size=(10, 10)).shape
        torch.Size([1, 4, 10, 10])
    """

    nd = 2


class ConvTranspose3d(_ConvTransposeNd):
    """Transposed 3-d convolution; see :class:`ConvTranspose2d`.

    Example:
        >>> import ember
        >>> ember.nn.ConvTranspose3d(2, 2, 2, stride=2)(ember.randn(1, 2, 2, 2, 2)).shape
        torch.Size([1, 2, 4, 4, 4])
    """

    nd = 3
