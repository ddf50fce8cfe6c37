"""Saved tensor hooks (``torch.autograd.graph.saved_tensors_hooks``): how a tensor saved for
backward is stored. Exported by ``autograd.graph``, which packs and unpacks with them."""

_saved_hooks = []     # stack of (pack_hook, unpack_hook), or a str: hooks disabled, the reason


class saved_tensors_hooks:
    """Within the block, each tensor saved for backward is stored as ``pack_hook(tensor)`` and
    given back to backward as ``unpack_hook(packed)`` (e.g. to offload or recompute it). Saved
    through hooks, a tensor is not checked for later in-place changes, as in torch.

    Example:
        >>> import ember
        >>> x = ember.tensor([1.0, 2.0], requires_grad=True)
        >>> with ember.autograd.graph.saved_tensors_hooks(lambda t: t.tolist(),
        ...                                               lambda v: ember.tensor(v)):
        ...     y = (x * x).sum()
        >>> y.backward()
        >>> x.grad
        tensor([2., 4.])
    """

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook, self.unpack_hook = pack_hook, unpack_hook

    def __enter__(self):
        if _saved_hooks and isinstance(_saved_hooks[-1], str):
            raise RuntimeError(_saved_hooks[-1])
        _saved_hooks.append((self.pack_hook, self.unpack_hook))
        return self

    def __exit__(self, *exc):
        _saved_hooks.pop()


class save_on_cpu(saved_tensors_hooks):
    """Keep tensors saved for backward in cpu memory, moving them back when backward runs."""

    def __init__(self, pin_memory=False, device_type="cuda"):
        super().__init__(lambda t: (t.device, t.to("cpu")), lambda p: p[1].to(p[0]))


class disable_saved_tensors_hooks:
    """Within the block, entering ``saved_tensors_hooks`` raises ``RuntimeError(error_message)``.
    """

    def __init__(self, error_message):
        self.error_message = error_message

    def __enter__(self):
        _saved_hooks.append(self.error_message)

    def __exit__(self, *exc):
        _saved_hooks.pop()


class _Packed:
    """A saved tensor as its pack hook left it."""

    __slots__ = ("value", "unpack_hook")

    def __init__(self, t, hooks):
        self.value, self.unpack_hook = hooks[0](t), hooks[1]

    def unpack(self):
        return self.unpack_hook(self.value)


def _active_hooks():
    return _saved_hooks[-1] if _saved_hooks and not isinstance(_saved_hooks[-1], str) else None


def _pack(a, hooks):
    if hasattr(a, "_data"):
        return _Packed(a, hooks)
    if isinstance(a, (list, tuple)):
        return [_Packed(t, hooks) if hasattr(t, "_data") else t for t in a]
    return a


def _unpack(a):
    if isinstance(a, _Packed):
        return a.unpack()
    if isinstance(a, list) and any(isinstance(t, _Packed) for t in a):
        return [t.unpack() if isinstance(t, _Packed) else t for t in a]
    return a
