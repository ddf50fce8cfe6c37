"""``LazyModuleMixin`` and the lazy layers (``LazyLinear``, ``LazyConv*``,
``LazyConvTranspose*``, ``LazyBatchNorm*``, ``LazyInstanceNorm*``), as torch's.

A lazy module holds ``UninitializedParameter``/``UninitializedBuffer`` until its first forward:
a forward pre-hook reads the sizes off the input (``initialize_parameters``), materializes
them, runs ``reset_parameters`` and turns the module into its plain class
(``cls_to_become``). Loading a state dict into a lazy module materializes from the
checkpoint's shapes.
"""
import itertools

from ...autograd.grad_mode import no_grad
from ..parameter import UninitializedBuffer, UninitializedParameter, is_lazy
from .batchnorm import (BatchNorm1d, BatchNorm2d, BatchNorm3d, InstanceNorm1d, InstanceNorm2d,
                        InstanceNorm3d, _NormBase)
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .linear import Linear


class LazyModuleMixin:
    """Mixin for modules whose parameters' shapes come from the first input: define
    ``initialize_parameters(*inputs)`` (materialize, then ``reset_parameters``) and
    ``cls_to_become``.

    Example:
        >>> import ember
        >>> m = ember.nn.LazyLinear(3)
        >>> m.has_uninitialized_params(), m.weight
        (True, <UninitializedParameter>)
        >>> _ = m(ember.ones(2, 5))
        >>> type(m).__name__, m.weight.shape
        ('Linear', torch.Size([3, 5]))
    """
    cls_to_become = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._load_hook = self._register_load_state_dict_pre_hook(self._lazy_load_hook)
        self._initialize_hook = self.register_forward_pre_hook(self._infer_parameters,
                                                               with_kwargs=True)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if is_lazy(p) or keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = b if is_lazy(b) or keep_vars else b.detach()

    def _lazy_load_hook(self, state_dict, prefix, local_metadata, strict, missing_keys,
                        unexpected_keys, error_msgs):
        for name, p in itertools.chain(self._parameters.items(), self._buffers.items()):
            key = prefix + name
            if key in state_dict and p is not None and is_lazy(p) and not is_lazy(state_dict[key]):
                with no_grad():
                    p.materialize(state_dict[key].shape)

    def initialize_parameters(self, *args, **kwargs):
        """Materialize the parameters from the first inputs (each lazy class defines it)."""
        raise NotImplementedError(f"initialize_parameters is not implemented for "
                                  f"{self.__class__.__name__}")

    def has_uninitialized_params(self):
        """Whether any parameter or buffer is still uninitialized."""
        return any(is_lazy(p) for p in itertools.chain(self._parameters.values(),
                                                        self._buffers.values()))

    def _infer_parameters(self, module, args, kwargs=None):
        module.initialize_parameters(*args, **(kwargs or {}))
        if module.has_uninitialized_params():
            raise RuntimeError(f"module {self._get_name()} has not been fully initialized")
        module._initialize_hook.remove()
        module._load_hook.remove()
        del module._initialize_hook, module._load_hook
        if module.cls_to_become is not None:
            module.__class__ = module.cls_to_become

    def _replicate_for_data_parallel(self):
        raise RuntimeError("Modules with uninitialized parameters can't be used with "
                           "`DataParallel`. Run a dummy forward pass to correctly initialize "
                           "the modules")


class LazyLinear(LazyModuleMixin, Linear):
    """:class:`Linear` with ``in_features`` read off the first input's last dim.

    Example:
        >>> import ember
        >>> m = ember.nn.LazyLinear(4)
        >>> m(ember.ones(2, 7)).shape, m
        (torch.Size([2, 4]), Linear(in_features=7, out_features=4, bias=True))
    """
    cls_to_become = Linear

    def __init__(self, out_features, bias=True, device=None, dtype=None):
        super().__init__(0, 0, False)
        self.weight = UninitializedParameter(device=device, dtype=dtype)
        self.out_features = out_features
        if bias:
            self.bias = UninitializedParameter(device=device, dtype=dtype)

    def reset_parameters(self):
        if not self.has_uninitialized_params() and self.in_features != 0:
            super().reset_parameters()

    def initialize_parameters(self, input):
        if self.has_uninitialized_params():
            with no_grad():
                self.in_features = input.shape[-1]
                self.weight.materialize((self.out_features, self.in_features))
                if self.bias is not None:
                    self.bias.materialize((self.out_features,))
                self.reset_parameters()


class _LazyConvXdMixin(LazyModuleMixin):
    def _lazy_init(self, out_channels, bias, device, dtype, **conv):
        # in_channels (and out_channels) 0 until the first input, as torch's
        LazyModuleMixin.__init__(self, 0, 0, bias=False, device=device, dtype=dtype, **conv)
        self.weight = UninitializedParameter(device=device, dtype=dtype)
        self.out_channels = out_channels
        if bias:
            self.bias = UninitializedParameter(device=device, dtype=dtype)

    def __init__(self, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None):
        self._lazy_init(out_channels, bias, device, dtype, kernel_size=kernel_size,
                        stride=stride, padding=padding, dilation=dilation, groups=groups,
                        padding_mode=padding_mode)

    def reset_parameters(self):
        if not self.has_uninitialized_params() and self.in_channels != 0:
            super().reset_parameters()

    def initialize_parameters(self, input, *args, **kwargs):
        if self.has_uninitialized_params():
            n = self.nd + 1
            if input.dim() not in (n, n + 1):
                raise RuntimeError(f"Expected {n}D (unbatched) or {n + 1}D (batched) input to "
                                   f"{self.__class__.__name__}, but got input of size: "
                                   f"{input.shape}")
            self.in_channels = input.shape[1 if input.dim() == n + 1 else 0]
            if self.in_channels % self.groups != 0:
                raise ValueError("in_channels must be divisible by groups")
            outer = (self.in_channels, self.out_channels // self.groups) if self.transposed \
                else (self.out_channels, self.in_channels // self.groups)
            with no_grad():
                self.weight.materialize((*outer, *self.kernel_size))
                if self.bias is not None:
                    self.bias.materialize((self.out_channels,))
                self.reset_parameters()


def _transposed_init(self, out_channels, kernel_size, stride=1, padding=0, output_padding=0,
                     groups=1, bias=True, dilation=1, padding_mode="zeros", device=None,
                     dtype=None):
    self._lazy_init(out_channels, bias, device, dtype, kernel_size=kernel_size, stride=stride,
                    padding=padding, output_padding=output_padding, groups=groups,
                    dilation=dilation, padding_mode=padding_mode)


def _lazy_conv(base, transposed):
    params = ("out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1, "
              "bias=True, dilation=1, padding_mode='zeros', device=None, dtype=None") \
        if transposed else ("out_channels, kernel_size, stride=1, padding=0, dilation=1, "
                            "groups=1, bias=True, padding_mode='zeros', device=None, dtype=None")
    extra = {"__init__": _transposed_init} if transposed else {}
    cls = type("Lazy" + base.__name__, (_LazyConvXdMixin, base), {**extra,
        "cls_to_become": base, "__module__": __name__,
        "__doc__": f":class:`{base.__name__}` with ``in_channels`` read off the first input "
                   f"(arguments: {params}).\n\n    Example:\n        >>> import ember\n        >>> "
                   f"m = ember.nn.Lazy{base.__name__}(4, 3)\n        >>> _ = m(ember.ones((1, 2) + "
                   f"(5,) * {base.nd}))\n        >>> m.in_channels, type(m).__name__\n        (2, "
                   f"'{base.__name__}')\n"})
    return cls


LazyConv1d, LazyConv2d, LazyConv3d = (_lazy_conv(c, False) for c in (Conv1d, Conv2d, Conv3d))
LazyConvTranspose1d, LazyConvTranspose2d, LazyConvTranspose3d = (
    _lazy_conv(c, True) for c in (ConvTranspose1d, ConvTranspose2d, ConvTranspose3d))


class _LazyNormBase(LazyModuleMixin, _NormBase):
    def __init__(self, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 device=None, dtype=None):
        super().__init__(0, eps, momentum, False, False, device=device, dtype=dtype)
        self.affine, self.track_running_stats = affine, track_running_stats
        fk = dict(device=device, dtype=dtype)
        if affine:
            self.weight, self.bias = UninitializedParameter(**fk), UninitializedParameter(**fk)
        if track_running_stats:
            self.running_mean, self.running_var = UninitializedBuffer(**fk), \
                UninitializedBuffer(**fk)
            from ..._ops.creation import tensor
            from ... import _dtype
            self.num_batches_tracked = tensor(0, dtype=_dtype.int64, device=device)

    def reset_parameters(self):
        if not self.has_uninitialized_params() and self.num_features != 0:
            super().reset_parameters()

    def initialize_parameters(self, input):
        if self.has_uninitialized_params():
            self.num_features = input.shape[1]
            if self.affine:
                self.weight.materialize((self.num_features,))
                self.bias.materialize((self.num_features,))
            if self.track_running_stats:
                self.running_mean.materialize((self.num_features,))
                self.running_var.materialize((self.num_features,))
            self.reset_parameters()


def _lazy_norm(base):
    # NOTE: as torch's, the lazy instance norms default to affine=True, track_running_stats=True
    default = "affine=True, track_running_stats=True"
    cls = type("Lazy" + base.__name__, (_LazyNormBase, base), {
        "cls_to_become": base, "__module__": __name__,
        "__doc__": f":class:`{base.__name__}` with ``num_features`` read off the first input's dim "
                   f"1 (arguments: eps=1e-05, momentum=0.1, {default}, device, dtype).\n\n    "
                   f"Example:\n        >>> import ember\n        >>> m = "
                   f"ember.nn.Lazy{base.__name__}()\n        >>> _ = m(ember.randn((2, 3) + (4,) * "
                   f"{max(base.nd, 1)}))\n        >>> m.num_features, type(m).__name__\n        "
                   f"(3, '{base.__name__}')\n"})
    return cls


LazyBatchNorm1d, LazyBatchNorm2d, LazyBatchNorm3d = (
    _lazy_norm(c) for c in (BatchNorm1d, BatchNorm2d, BatchNorm3d))
LazyInstanceNorm1d, LazyInstanceNorm2d, LazyInstanceNorm3d = (
    _lazy_norm(c) for c in (InstanceNorm1d, InstanceNorm2d, InstanceNorm3d))
