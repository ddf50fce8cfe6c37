"""Devices: ``cpu`` (NumPy), ``cuda`` (CuPy) and ``meta`` (shapes and dtypes only)."""

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


_PLAIN = {}
CPU = device("cpu")
META = device("meta")
_PLAIN.update(cpu=CPU, meta=META)


def to_device(d):
    """Normalize a device argument; ``cuda`` without an index means the current device 0."""
    if d is None or d is CPU:
        return CPU
    d = device(d)
    if d.type == "cuda" and d.index is None:
        return device("cuda", 0)
    if d.type == "cpu" and d.index is not None:
        return CPU
    return d


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
        raise RuntimeError(f"Invalid value of device '{device}', expect torch.device, str, or "
                           "None")
    try:
        return getattr(this, name)
    except AttributeError:
        raise RuntimeError(f"Device '{name}' does not have a corresponding module registered as "
                           f"'torch.{name}'.") from None
