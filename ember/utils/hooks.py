"""``torch.utils.hooks``: the handle hooks return (``RemovableHandle``), and the serialization
warning helpers. See https://pytorch.org/docs/stable/generated/torch.nn.Module.html#hooks."""
from .._hooks import RemovableHandle, unserializable_hook, warn_if_has_hooks  # noqa: F401
from ..nn.modules._backward_hooks import BackwardHook  # noqa: F401

__all__ = ["RemovableHandle", "unserializable_hook", "warn_if_has_hooks", "BackwardHook"]
