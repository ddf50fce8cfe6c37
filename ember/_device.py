"""Devices: ``cpu`` (NumPy), ``cuda`` (CuPy) and ``meta`` (shapes and dtypes only), and the
default device of factories."""
import contextvars

_TYPES = ("cpu", "cuda", "meta")


class device:
    """Where a tensor lives, like ``torch.device``.

    Example:
        >>> import ember
        >>> ember.device("cuda:1")
        device(type='cuda', index=1)
    """

    __slots__ = ("type", "index")

    def __new__(cls, type, index=None):
        if index is None and cls is device and type.__class__ is str:
            plain = _PLAIN.get(type)      # (cpu, meta: one immutable object each)
            if plain is not None:
                return plain
        if isinstance(type, device):
            return type
        if isinstance(type, int):                 # torch.device(0) means cuda:0
            type, index = "cuda", type
        if not isinstance(type, str):
            raise TypeError(f"device(): expected a string, int or device, got {type!r}")
        if ":" in type:
            if index is not None:
                raise ValueError(f"device(): type (string) must not include an index because "
                                 f"index was passed explicitly: {type}")
            type, _, idx = type.partition(":")
            if not idx.isdigit():
                raise RuntimeError(f"Invalid device string: '{type}:{idx}'")
            index = int(idx)
        if type not in _TYPES:
            raise RuntimeError(f"Expected one of {', '.join(_TYPES)} device type at start of "
                               f"device string: {type}")
        if index is not None and index < 0:
            raise RuntimeError(f"Device index must not be negative, got {index}")
        self = object.__new__(cls)
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "index", index)
        return self

    def __setattr__(self, k, v):
        raise AttributeError("device is immutable")

    def __eq__(self, other):
        if isinstance(other, str):
            other = device(other)
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        i = "" if self.index is None else f", index={self.index}"
        return f"device(type='{self.type}'{i})"

    def __reduce__(self):
        return (device, (self.type, self.index))

    def __enter__(self):
        """``with device(...)``: the default device of factories and module construction
        inside the block (in this thread), as torch's; the device itself is left as it is.

        Example:
            >>> import ember
            >>> with ember.device("meta"):
            ...     ember.nn.Linear(2, 3).weight.device
            device(type='meta')
        """
        global _any_default
        _any_default = True
        _DEFAULT.set(_DEFAULT.get() + (to_device(self),))
        return self

    def __exit__(self, *exc):
        _DEFAULT.set(_DEFAULT.get()[:-1])


_PLAIN = {}
CPU = device("cpu")
META = device("meta")
_PLAIN.update(cpu=CPU, meta=META)


# The default device, per thread (and asyncio task), as torch's: a stack whose first entry is
# set_default_device's (None: cpu) and each `with device` block pushes one.
_DEFAULT = contextvars.ContextVar("ember_default_device", default=(None,))
_any_default = False        # until a default is first set, to_device(None) reads this alone


def default_device():
    """The default device set by ``set_default_device`` or ``with device``, or None."""
    return _DEFAULT.get()[-1] if _any_default else None


def get_default_device():
    """The device factories use when given none (cpu unless set), as
    ``torch.get_default_device``.

    Example:
        >>> import ember
        >>> ember.get_default_device()
        device(type='cpu')
    """
    return default_device() or CPU


def set_default_device(device):
    """Make factories (``empty``, ``zeros``, ``rand``, ``arange``, ``tensor``...) and module
    construction put tensors on ``device`` when given no device, in this thread; ``None``
    restores cpu. As ``torch.set_default_device``, calls with an explicit device, ``*_like``
    functions and ops on existing tensors are unaffected.

    Example:
        >>> import ember
        >>> ember.set_default_device("meta")
        >>> ember.zeros(2).device
        device(type='meta')
        >>> ember.set_default_device(None)
    """
    global _any_default
    _any_default = True
    d = None if device is None else to_device(device)
    stack = _DEFAULT.get()
    # inside `with device(...)` the new default takes over at once and outlives the block (torch
    # fails on leaving such a block: "Found nested DeviceContext on the mode stack")
    _DEFAULT.set((d,) + stack[1:-1] + ((d,) if len(stack) > 1 else ()))


def to_device(d):
    """Normalize a device argument; ``cuda`` without an index means the current device 0, and
    None the default device."""
    if d is None:
        return (_DEFAULT.get()[-1] or CPU) if _any_default else CPU
    if d is CPU:
        return CPU
    d = device(d)
    if d.type == "cuda" and d.index is None:
        return device("cuda", 0)
    return CPU if d.type == "cpu" and d.index is not None else d


def get_device_module(device=None):
    """The module of a device type: ``ember.cuda`` for ``'cuda:0'``, ``ember.cpu`` for the CPU;
    with no device, the accelerator's (cuda where it is available) else ``ember.cpu``.

    Example:
        >>> ember.get_device_module("cpu").device_count()
        1
    """
    import sys
    this = sys.modules["ember"]         # (its attributes load on first use, through __getattr__)
    if isinstance(device, (str, this.device)):
        name = this.device(device).type
    elif device is None:
        name = "cuda" if this.cuda.is_available() else "cpu"
    else:
        raise RuntimeError(f"Invalid value of device '{device}', expect torch.device, str, or None")
    try:
        return getattr(this, name)
    except AttributeError:
        raise RuntimeError(f"Device '{name}' does not have a corresponding module registered as "
                           f"'torch.{name}'.") from None
