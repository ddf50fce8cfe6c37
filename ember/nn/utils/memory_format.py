"""Conv weights in another memory format (``torch.nn.utils.memory_format``), and ``skip_init``."""
import inspect

from ..modules.conv import Conv2d, Conv3d, ConvTranspose2d, ConvTranspose3d

__all__ = ["convert_conv2d_weight_memory_format", "convert_conv3d_weight_memory_format"]


def _convert(module, memory_format, kinds):
    if isinstance(module, kinds):
        module.weight.data = module.weight.detach().clone(memory_format=memory_format)
    for child in module.children():
        _convert(child, memory_format, kinds)
    return module


def convert_conv2d_weight_memory_format(module, memory_format):
    """Lays out the weights of every ``Conv2d``/``ConvTranspose2d`` in ``module`` (itself
    included) in ``memory_format`` (``channels_last``...), in place; returns ``module``.

    Example:
        >>> import ember
        >>> from ember.nn.utils import convert_conv2d_weight_memory_format
        >>> m = ember.nn.Sequential(ember.nn.Conv2d(3, 8, 3))
        >>> m = convert_conv2d_weight_memory_format(m, ember.channels_last)
        >>> m[0].weight.is_contiguous(memory_format=ember.channels_last)
        True
    """
    return _convert(module, memory_format, (Conv2d, ConvTranspose2d))


def convert_conv3d_weight_memory_format(module, memory_format):
    """The 3-D :func:`convert_conv2d_weight_memory_format` (``Conv3d``/``ConvTranspose3d``,
    ``channels_last_3d``)."""
    return _convert(module, memory_format, (Conv3d, ConvTranspose3d))


def skip_init(module_cls, *args, **kwargs):
    """``module_cls(*args, **kwargs)`` with its parameters left uninitialized (made on the meta
    device, then allocated on ``device``): for modules about to be loaded or initialized
    another way. The module must take a ``device`` argument.

    Example:
        >>> import ember
        >>> m = ember.nn.utils.skip_init(ember.nn.Linear, 4, 2)
        >>> m.weight.shape, m.weight.device
        (torch.Size([2, 4]), device(type='cpu'))
    """
    from ..modules.module import Module
    if not (isinstance(module_cls, type) and issubclass(module_cls, Module)):
        raise RuntimeError(f"Expected a Module; got {module_cls}")
    if "device" not in inspect.signature(module_cls).parameters:
        raise RuntimeError("Module must support a 'device' arg to skip initialization")
    final_device = kwargs.pop("device", "cpu")
    kwargs["device"] = "meta"
    return module_cls(*args, **kwargs).to_empty(device=final_device)
