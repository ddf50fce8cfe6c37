"""Automatic mixed precision: ``autocast`` regions and the per-op cast policies.

An op's policy is a tag on its OpDef (``ember/_ops``), or on a composite function through
:func:`autocast_policy` (``nn.functional``'s losses and norms):

- ``autocast_lower``: cast floating inputs to the region's dtype (matmul, linear, conv...);
- ``autocast_fp32``: cast half and bfloat16 inputs to float32 (losses, prod...);
- ``autocast_promote``: cast floating inputs to the widest among them (cat, stack...);
- ``autocast_banned``: refuse to run in a region (binary_cross_entropy on CUDA);
- ``autocast_keep`` (composites only): run in the inputs' dtypes, though built from ops that
  autocast would cast (average pooling is a convolution with a ones kernel).

A ``_cpu`` or ``_cuda`` suffix limits a tag to one device, following torch's two op lists
(``aten/src/ATen/autocast_mode.cpp``): on the CPU softmax and exp run in the input's dtype, on
CUDA in float32. float64 tensors are never cast. The policies run in
``dispatch.hooks.autocast``, installed only while a region is enabled, so code outside
autocast pays nothing. See https://pytorch.org/docs/stable/amp.html.
"""
import functools
import warnings

from .. import _dtype
from .._ops.dispatch import _flatten, hooks
from .._tensor import Tensor

__all__ = ["autocast", "is_autocast_enabled", "get_autocast_dtype", "set_autocast_enabled",
           "set_autocast_dtype", "is_autocast_cache_enabled", "set_autocast_cache_enabled",
           "clear_autocast_cache", "autocast_policy"]

_DEVICES = ("cpu", "cuda")
_enabled = {"cpu": False, "cuda": False}
_dtypes = {"cpu": _dtype.bfloat16, "cuda": _dtype.float16}
_cache_enabled = [True]
_nesting = [0]
_cache = {}             # id(fp32 leaf) -> (leaf, its cast): the leaf is kept so ids stay unique
_POLICIES = {}          # OpDef -> {device type: kind}, read off its tags once


def is_autocast_enabled(device_type="cuda"):
    """Whether autocast is on for ``device_type``.

    Example:
        >>> import ember
        >>> with ember.autocast("cpu"):
        ...     print(ember.is_autocast_enabled("cpu"), ember.is_autocast_enabled("cuda"))
        True False
    """
    return _enabled[_device_type(device_type)]


def get_autocast_dtype(device_type):
    """The dtype lower-precision ops run in under autocast on ``device_type``.

    Example:
        >>> import ember
        >>> ember.get_autocast_dtype("cpu")
        torch.bfloat16
    """
    return _dtypes[_device_type(device_type)]


def set_autocast_enabled(device_type, enabled):
    """Turn autocast on ``device_type`` on or off outside a ``with`` block (torch's low-level
    switch; prefer :class:`autocast`)."""
    _enabled[_device_type(device_type)] = bool(enabled)
    _install()


def set_autocast_dtype(device_type, dtype):
    _dtypes[_device_type(device_type)] = dtype


def is_autocast_cache_enabled():
    return _cache_enabled[0]


def set_autocast_cache_enabled(enabled):
    _cache_enabled[0] = bool(enabled)


def clear_autocast_cache():
    """Drop the low-precision copies of weights cast in the current region."""
    _cache.clear()


def autocast_increment_nesting():
    """Enter one more autocast region by hand; returns the depth (torch's low-level call)."""
    _nesting[0] += 1
    return _nesting[0]


def autocast_decrement_nesting():
    """Leave one autocast region by hand; returns the depth left (at 0, as on leaving the
    outermost ``autocast``, a caller clears the cache with :func:`clear_autocast_cache`)."""
    _nesting[0] -= 1
    return _nesting[0]


def _legacy(name, new, fn):
    # torch's device-specific spellings, deprecated for the device_type argument
    def f(*args):
        warnings.warn(f"torch.{name}() is deprecated. Please use torch.{new} instead.",
                      DeprecationWarning, stacklevel=2)
        return fn(*args)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"Deprecated: ``torch.{new}``."
    return f


LEGACY = {n: _legacy(n, new, fn) for n, new, fn in (
    ("is_autocast_cpu_enabled", "is_autocast_enabled('cpu')",
     lambda: is_autocast_enabled("cpu")),
    ("set_autocast_cpu_enabled", "set_autocast_enabled('cpu', enabled)",
     lambda enabled: set_autocast_enabled("cpu", enabled)),
    ("get_autocast_cpu_dtype", "get_autocast_dtype('cpu')", lambda: get_autocast_dtype("cpu")),
    ("set_autocast_cpu_dtype", "set_autocast_dtype('cpu', dtype)",
     lambda dtype: set_autocast_dtype("cpu", dtype)),
    ("get_autocast_gpu_dtype", "get_autocast_dtype('cuda')",
     lambda: get_autocast_dtype("cuda")),
    ("set_autocast_gpu_dtype", "set_autocast_dtype('cuda', dtype)",
     lambda dtype: set_autocast_dtype("cuda", dtype)))}
globals().update(LEGACY)


def _device_type(device_type):
    if device_type not in _DEVICES:
        raise RuntimeError(f"User specified an unsupported autocast device_type '{device_type}'")
    return device_type


def _install():
    hooks.autocast = _hook if _enabled["cpu"] or _enabled["cuda"] else None


class autocast:
    """Run ops in mixed precision inside a ``with`` block or a decorated function.

    Args:
        device_type (str): ``"cpu"`` or ``"cuda"``: only tensors on that device are cast.
        dtype: the lower precision, default ``bfloat16`` on the CPU, ``float16`` on CUDA.
        enabled (bool, default True): False makes a region that runs everything as written
            (inside an enabled one, too).
        cache_enabled (bool, default: the global setting, True): reuse a weight's cast within
            the outermost region.

    Example:
        >>> import ember
        >>> a, b = ember.ones(2, 3), ember.ones(3, 2)
        >>> with ember.autocast("cpu"):
        ...     c = a @ b
        ...     with ember.autocast("cpu", enabled=False):
        ...         d = a @ b
        >>> c.dtype, d.dtype
        (torch.bfloat16, torch.float32)
    """

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        self.device = _device_type(device_type)
        self.fast_dtype = _dtypes[self.device] if dtype is None else dtype
        self._cache_enabled = _cache_enabled[0] if cache_enabled is None else cache_enabled
        self._enabled = enabled
        if enabled and self.device == "cuda" and not _cuda_available():
            warnings.warn("User provided device_type of 'cuda', but CUDA is not available. "
                          "Disabling")
            self._enabled = False
        elif enabled and self.device == "cuda" and self.fast_dtype is _dtype.bfloat16:
            from .. import cuda
            if not cuda.is_bf16_supported():
                raise RuntimeError("Current CUDA Device does not support bfloat16. Please "
                                   "switch dtype to float16.")
        if self._enabled and self.fast_dtype not in (_dtype.bfloat16, _dtype.float16):
            name = self.device.upper()
            warnings.warn(f"In {name} autocast, but the target dtype is not supported. "
                          f"Disabling autocast.\n{name} Autocast only supports dtype of "
                          "torch.bfloat16, torch.float16 currently.")
            self._enabled = False

    def __enter__(self):
        dev = self.device
        self._prev = (_enabled[dev], _dtypes[dev], _cache_enabled[0])
        _enabled[dev], _dtypes[dev] = self._enabled, self.fast_dtype
        _cache_enabled[0] = self._cache_enabled
        _nesting[0] += 1
        _install()
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        _nesting[0] -= 1
        if _nesting[0] == 0:
            _cache.clear()
        dev = self.device
        _enabled[dev], _dtypes[dev], _cache_enabled[0] = self._prev
        _install()
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            # a fresh region per call, so recursion and threads do not share saved state
            with autocast(self.device, self.fast_dtype, self._enabled, self._cache_enabled):
                return func(*args, **kwargs)
        return wrapper


def _cuda_available():
    from .. import cuda
    return cuda.is_available()


# ---- the policies ---------------------------------------------------------------------------

def _parse(tags):
    """``("autocast_fp32_cuda", ...)`` -> ``{"cuda": "fp32"}``."""
    pol = {}
    for tag in tags:
        if tag.startswith("autocast_"):
            kind, _, dev = tag[len("autocast_"):].partition("_")
            for d in ((dev,) if dev else _DEVICES):
                pol[d] = kind
    return pol


def _hook(opdef, args, tensors, arrays):
    """dispatch's autocast step: cast ``args`` by ``opdef``'s policy on the tensors' device."""
    pol = _POLICIES.get(opdef)
    if pol is None:
        pol = _POLICIES[opdef] = _parse(opdef.tags)
    if not pol:
        return args, tensors, arrays
    dev = tensors[0].device.type
    kind = pol.get(dev)
    if kind is None or not _enabled.get(dev):
        return args, tensors, arrays
    new = _cast_all(opdef.name, kind, dev, args, tensors)
    if all(a is b for a, b in zip(new, args)):
        return args, tensors, arrays
    tensors, arrays = _flatten(opdef, new, None)
    return new, tensors, arrays


def _eligible(t, dev):
    return t.device.type == dev and t.dtype.category == _dtype._FLOAT and \
        t.dtype is not _dtype.float64


def _target(name, kind, dev, tensors):
    if kind == "lower":
        return _dtypes[dev]
    if kind == "fp32":
        return _dtype.float32
    if kind == "banned":
        raise RuntimeError(f"{name}: torch.nn.functional.binary_cross_entropy and "
                           "torch.nn.BCELoss are unsafe to autocast.\nMany models use a sigmoid "
                           "layer right before the binary cross entropy layer.\nIn this case, "
                           "combine the two layers using torch.nn.functional.binary_cross_entropy"
                           "_with_logits\nor torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_"
                           "with_logits and BCEWithLogits are\nsafe to autocast.")
    # promote: float32 wins over the region's dtype; float64 takes no part (as torch's)
    to = _dtypes[dev]
    for t in tensors:
        if _eligible(t, dev) and t.dtype is not to:
            if t.dtype is not _dtype.float32 and to is not _dtype.float32:
                raise RuntimeError(f"{name}: Unexpected floating ScalarType in "
                                   "at::autocast::prioritize")
            to = _dtype.float32
    return to


def _cast_all(name, kind, dev, args, tensors):
    to = _target(name, kind, dev, tensors)
    return [_cast_arg(a, to, dev) for a in args]


def _cast_arg(a, to, dev):
    if isinstance(a, Tensor):
        return _cast(a, to, dev)
    if type(a) in (list, tuple) and a and isinstance(a[0], Tensor):
        return type(a)(_cast(t, to, dev) for t in a)
    return a


def _cast(t, to, dev):
    if t.dtype is to or not _eligible(t, dev):
        return t
    # NOTE: as torch, only a float32 leaf that requires grad (a weight) is cached, and only its
    # cast to the region's dtype: the same weight used by many ops is cast once per region.
    if _cache_enabled[0] and to is _dtypes[dev] and t.dtype is _dtype.float32 and \
            t._requires_grad and t.grad_fn is None and t._base is None:
        hit = _cache.get(id(t))
        if hit is None:
            hit = _cache[id(t)] = (t, t.to(to))
        return hit[1]
    return t.to(to)


def autocast_policy(*tags):
    """Give a composite function (one made of several ops) an autocast policy, as a tag gives
    an OpDef: in a region its tensor arguments are cast by the policy, and its body runs with
    autocast off, as torch runs such an op's kernel.

    Example:
        >>> import ember
        >>> from ember.amp.autocast_mode import autocast_policy
        >>> @autocast_policy("autocast_fp32")
        ... def f(x):
        ...     return x * 2
        >>> with ember.autocast("cpu"):
        ...     f(ember.ones(2, dtype=ember.bfloat16)).dtype
        torch.float32
    """
    pol = _parse(tags)

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if hooks.autocast is None:
                return fn(*args, **kwargs)
            ts = [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]
            dev = ts[0].device.type if ts else None
            kind = pol.get(dev)
            if kind is None or not _enabled[dev]:
                return fn(*args, **kwargs)
            if kind != "keep":
                to = _target(fn.__name__, kind, dev, ts)
                args = [_cast_arg(a, to, dev) for a in args]
                kwargs = {k: _cast_arg(v, to, dev) for k, v in kwargs.items()}
            _enabled[dev] = False
            try:
                return fn(*args, **kwargs)
            finally:
                _enabled[dev] = True
        wrapper._autocast_tags = tags
        return wrapper
    return deco


# ---- custom autograd Functions ----------------------------------------------------------------

def custom_fwd(fwd=None, *, device_type, cast_inputs=None):
    """Decorate a custom ``Function.forward`` for autocast: with ``cast_inputs`` set, inside a
    region the forward runs with autocast off and its floating tensors cast to ``cast_inputs``;
    the region's state is kept for :func:`custom_bwd`.

    Example:
        >>> import ember
        >>> class Sq(ember.autograd.Function):
        ...     @staticmethod
        ...     @ember.amp.custom_fwd(device_type="cpu", cast_inputs=ember.float32)
        ...     def forward(ctx, x):
        ...         return x * x
        >>> with ember.autocast("cpu"):
        ...     Sq.apply(ember.ones(2, dtype=ember.bfloat16)).dtype
        torch.float32
    """
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)
    dev = _device_type(device_type)

    @functools.wraps(fwd)
    def forward(*args, **kwargs):
        ctx = args[0]
        ctx._dtype = _dtypes[dev]
        if cast_inputs is None or not _enabled[dev]:
            ctx._fwd_used_autocast = _enabled[dev]
            return fwd(*args, **kwargs)
        ctx._fwd_used_autocast = False
        args = [_cast_arg(a, cast_inputs, dev) for a in args]
        kwargs = {k: _cast_arg(v, cast_inputs, dev) for k, v in kwargs.items()}
        with autocast(dev, enabled=False):
            return fwd(*args, **kwargs)
    return forward


def custom_bwd(bwd=None, *, device_type):
    """Decorate a custom ``Function.backward`` to run under the autocast state its forward ran
    under (see :func:`custom_fwd`)."""
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)
    dev = _device_type(device_type)

    @functools.wraps(bwd)
    def backward(ctx, *args, **kwargs):
        with autocast(dev, dtype=ctx._dtype, enabled=ctx._fwd_used_autocast):
            return bwd(ctx, *args, **kwargs)
    return backward
