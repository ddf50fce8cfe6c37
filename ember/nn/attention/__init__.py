"""``ember.nn.attention``: choosing the kernel behind ``scaled_dot_product_attention``, as
``torch.nn.attention``.

On the cpu two backends exist, as in torch: the fused flash kernel (``FLASH_ATTENTION``, taken
for 4-d operands without dropout) and the math path (``MATH``). ``sdpa_kernel`` switches them
with the flags ``ember.backends.cuda.enable_flash_sdp`` & co. share.
"""
import contextlib
import enum
import logging

__all__ = ["SDPBackend", "sdpa_kernel", "WARN_FOR_UNFUSED_KERNELS", "register_flash_attention_impl",
           "activate_flash_attention_impl", "list_flash_attention_impls",
           "current_flash_attention_impl", "restore_flash_attention_impl"]

WARN_FOR_UNFUSED_KERNELS = False
_FLAGS = {"FLASH_ATTENTION": "flash", "EFFICIENT_ATTENTION": "mem_efficient",
          "MATH": "math", "CUDNN_ATTENTION": "cudnn"}
_priority = [1, 2, 0, 3, 4]         # torch's default order (SDPBackend values)
_FLASH_ATTENTION_IMPLS, _FLASH_ATTENTION_ACTIVE = {}, None


class SDPBackend(enum.IntEnum):
    """The kernels scaled_dot_product_attention may run.

    Example:
        >>> from ember.nn.attention import SDPBackend
        >>> SDPBackend.MATH, int(SDPBackend.FLASH_ATTENTION)
        (<SDPBackend.MATH: 0>, 1)
    """
    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4


def _sdp():
    from ...backends import _sdp
    return _sdp


def _current(with_priority=False):
    on = [b for b in SDPBackend if b.name in _FLAGS and _sdp()[_FLAGS[b.name]]]
    return sorted(on, key=lambda b: _priority.index(int(b))) if with_priority else on


def _set(backends, set_priority=False):
    global _priority
    for name, flag in _FLAGS.items():
        _sdp()[flag] = SDPBackend[name] in backends
    if set_priority:
        _priority = [int(b) for b in backends] + [p for p in _priority if p not in backends]


@contextlib.contextmanager
def sdpa_kernel(backends, set_priority=False):
    """Within the block, scaled_dot_product_attention runs only the given backend(s) (in that
    order of preference with ``set_priority``); the previous flags come back on exit.

    Example:
        >>> import ember
        >>> from ember.nn.attention import SDPBackend, sdpa_kernel
        >>> q = ember.ones(1, 2, 4, 8, requires_grad=True)
        >>> with sdpa_kernel(SDPBackend.MATH):
        ...     y = ember.nn.functional.scaled_dot_product_attention(q, q, q)
        >>> y.grad_fn.name()
        'UnsafeViewBackward0'
    """
    if not isinstance(backends, (list, SDPBackend)):
        raise AssertionError("Backend must be an instance of SDPBackend or a list of SDPBackend "
                             f"instances, got {type(backends).__name__}")
    backends = list(dict.fromkeys([backends] if isinstance(backends, SDPBackend) else backends))
    previous = _current(with_priority=set_priority)
    try:
        _set(backends, set_priority)
        yield {}
    finally:
        _set(previous, set_priority)


def register_flash_attention_impl(impl, *, register_fn):
    """Register the callable that activates a flash attention implementation ``impl``
    (for kernel providers; users call :func:`activate_flash_attention_impl`).

    Example:
        >>> from ember.nn import attention
        >>> attention.register_flash_attention_impl("Mine", register_fn=lambda: None)
        >>> "Mine" in attention.list_flash_attention_impls()
        True
    """
    _FLASH_ATTENTION_IMPLS[impl] = register_fn


def activate_flash_attention_impl(impl):
    """Run ``impl``'s registration callable, first restoring the default implementation; the
    handle it returns (if any) is kept until :func:`restore_flash_attention_impl`.

    Example:
        >>> from ember.nn import attention
        >>> attention.register_flash_attention_impl("Mine", register_fn=lambda: None)
        >>> attention.activate_flash_attention_impl("Mine")
        >>> attention.current_flash_attention_impl() is None    # no handle: nothing to keep
        True
    """
    global _FLASH_ATTENTION_ACTIVE
    restore_flash_attention_impl(_raise_warn=False)
    register_fn = _FLASH_ATTENTION_IMPLS.get(impl)
    if register_fn is None:
        raise ValueError(f"Unknown flash attention impl '{impl}'. Available implementations: "
                         f"{list_flash_attention_impls()}")
    handle = register_fn()
    if handle is not None:
        _FLASH_ATTENTION_ACTIVE = (impl, handle)


def current_flash_attention_impl():
    """The name of the activated flash attention implementation, None for the default.

    Example:
        >>> from ember.nn import attention
        >>> attention.current_flash_attention_impl() is None
        True
    """
    return None if _FLASH_ATTENTION_ACTIVE is None else _FLASH_ATTENTION_ACTIVE[0]


def list_flash_attention_impls():
    """The registered flash attention implementations' names, sorted.

    Example:
        >>> from ember.nn import attention
        >>> isinstance(attention.list_flash_attention_impls(), list)
        True
    """
    return sorted(_FLASH_ATTENTION_IMPLS)


def restore_flash_attention_impl(_raise_warn=True):
    """Back to the default implementation: the active one's handle is removed.

    Example:
        >>> from ember.nn import attention
        >>> attention.restore_flash_attention_impl(_raise_warn=False)
    """
    global _FLASH_ATTENTION_ACTIVE
    handle = None if _FLASH_ATTENTION_ACTIVE is None else _FLASH_ATTENTION_ACTIVE[1]
    if handle is not None:
        handle.remove()
    elif _raise_warn:
        logging.getLogger(__name__).warning(
            "Trying to restore default FA2 impl when no custom impl was activated")
    _FLASH_ATTENTION_ACTIVE = None


def __getattr__(name):
    if name == "flex_attention":        # the submodule, loaded on first use
        import importlib
        return importlib.import_module(".flex_attention", __name__)
    raise AttributeError(f"module '{__name__}' has no attribute '{name}'")
