"""The rest of ``torch.serialization``'s API: storage location tags and CUDA device checks,
the default byte order of files that do not record one, the scan for globals a weights-only
load would refuse, and small helpers (``mkdtemp``, the module version check)."""
import contextlib
import enum
import io
import mmap
import pickletools
import shutil
import tempfile
import warnings
import zipfile

__all__ = ["SourceChangeWarning", "mkdtemp", "check_module_version_greater_or_equal",
           "location_tag", "validate_cuda_device", "LoadEndianness", "get_default_load_endianness",
           "set_default_load_endianness", "get_unsafe_globals_in_checkpoint",
           "get_default_mmap_options", "set_default_mmap_options"]


class SourceChangeWarning(Warning):
    """torch warns so when a pickled module's source changed since it was saved; ember does not
    store module source, so it never issues it (the class is here for warning filters)."""


@contextlib.contextmanager
def mkdtemp():
    """A temporary directory for the ``with`` block, removed after it.

    Example:
        >>> import os
        >>> with ember.serialization.mkdtemp() as d:
        ...     os.path.isdir(d)
        True
    """
    path = tempfile.mkdtemp()
    try:
        yield path
    finally:
        shutil.rmtree(path)


def check_module_version_greater_or_equal(module, req_version_tuple, error_if_malformed=True):
    """Whether ``module.__version__`` is at least ``req_version_tuple`` (compared field by field,
    each cast to the requirement's type).

    Example:
        >>> import numpy
        >>> ember.serialization.check_module_version_greater_or_equal(numpy, (1, 20))
        True
    """
    try:
        fields = module.__version__.split(".")
        have = tuple(type(req)(fields[i]) for i, req in enumerate(req_version_tuple))
        return have >= req_version_tuple
    except Exception as e:
        message = (f"'{module.__name__}' module version string is malformed '{module.__version__}' "
                   f"and cannot be compared with tuple {req_version_tuple}")
        if error_if_malformed:
            raise RuntimeError(message) from e
        warnings.warn(message + ", but continuing assuming that requirement is met", stacklevel=2)
        return True


def location_tag(storage):
    """Where a storage (or tensor) lives, as torch writes it in a checkpoint: ``'cpu'``,
    ``'cuda:0'``... (the first tagger of ``register_package``'s registry that names it).

    Example:
        >>> ember.serialization.location_tag(ember.ones(2).untyped_storage())
        'cpu'
    """
    from . import _registry
    return _registry.location_tag(storage)


def validate_cuda_device(location):
    """The device index of a ``'cuda[:i]'`` location, after checking CUDA is there and has
    that device (torch's errors otherwise)."""
    import ember
    index = ember.device(location).index or 0
    if not ember.cuda.is_available():
        raise RuntimeError("Attempting to deserialize object on a CUDA device but "
                           "torch.cuda.is_available() is False. If you are running on a "
                           "CPU-only machine, please use torch.load with "
                           "map_location=torch.device('cpu') to map your storages to the CPU.")
    count = ember.cuda.device_count()
    if index >= count:
        raise RuntimeError(f"Attempting to deserialize object on CUDA device {index} but "
                           f"torch.cuda.device_count() is {count}. Please use torch.load with "
                           "map_location to map your storages to an existing device.")
    return index


_mmap_flags = [mmap.MAP_PRIVATE]


def get_default_mmap_options():
    """How ``load(mmap=True)`` maps files: ``mmap.MAP_PRIVATE`` (the default: writes to the
    loaded tensors stay in memory) or ``mmap.MAP_SHARED`` (they go to the file)."""
    return _mmap_flags[0]


class set_default_mmap_options:
    """Sets how ``load(mmap=True)`` maps files (``mmap.MAP_PRIVATE`` or ``mmap.MAP_SHARED``);
    also a context manager that restores the previous setting.

    Example:
        >>> import mmap
        >>> with ember.serialization.set_default_mmap_options(mmap.MAP_SHARED):
        ...     ember.serialization.get_default_mmap_options() == mmap.MAP_SHARED
        True
        >>> ember.serialization.get_default_mmap_options() == mmap.MAP_PRIVATE
        True
    """

    def __init__(self, flags):
        if flags not in (mmap.MAP_PRIVATE, mmap.MAP_SHARED):
            raise ValueError("Invalid argument in function set_default_mmap_options, expected "
                             f"mmap.MAP_PRIVATE or mmap.MAP_SHARED, but got {flags}")
        self.prev, _mmap_flags[0] = _mmap_flags[0], flags

    def __enter__(self):
        """(The flags were set on construction, as torch's are.)"""

    def __exit__(self, *exc):
        _mmap_flags[0] = self.prev


class LoadEndianness(enum.Enum):
    """The byte order to read a checkpoint in when it does not record one."""
    NATIVE = 1
    LITTLE = 2
    BIG = 3


_endianness = [None]


def get_default_load_endianness():
    """The byte order assumed for checkpoints without a ``byteorder`` record (None: native)."""
    return _endianness[0]


def set_default_load_endianness(endianness):
    """Sets the byte order assumed for checkpoints without a ``byteorder`` record (files older
    than torch 2.1 do not have one).

    Example:
        >>> from ember.serialization import LoadEndianness
        >>> ember.serialization.set_default_load_endianness(LoadEndianness.LITTLE)
        >>> ember.serialization.get_default_load_endianness()
        <LoadEndianness.LITTLE: 2>
        >>> ember.serialization.set_default_load_endianness(None)
    """
    if endianness is not None and not isinstance(endianness, LoadEndianness):
        raise TypeError("Invalid argument type in function set_default_load_endianness")
    _endianness[0] = endianness


def get_unsafe_globals_in_checkpoint(f):
    """The globals (``"module.name"``) in a checkpoint that ``load(weights_only=True)`` would
    refuse, neither on its allowlist nor added by ``add_safe_globals``; the file is only
    scanned, nothing is loaded.

    Example:
        >>> import fractions, io
        >>> buf = io.BytesIO()
        >>> ember.save({"w": ember.ones(1), "f": fractions.Fraction(1, 3)}, buf)
        >>> _ = buf.seek(0)
        >>> ember.serialization.get_unsafe_globals_in_checkpoint(buf)
        ['fractions.Fraction']
    """
    from ._load import _open_for_read
    from ._unpickler import _TORCH_NAMES, _user_globals
    with _open_for_read(f) as fh:
        if not zipfile.is_zipfile(fh):
            raise ValueError("Expected input to be a checkpoint returned by torch.save")
        fh.seek(0)
        with zipfile.ZipFile(fh) as z:
            name = next((n for n in z.namelist() if n.endswith("/data.pkl") and
                         n.count("/") == 1), None)
            if name is None:
                raise ValueError("Expected input to be a checkpoint returned by torch.save")
            pkl = z.read(name)
    found, strings = set(), []
    for op, arg, _ in pickletools.genops(io.BytesIO(pkl)):
        if op.name == "GLOBAL":
            found.add(arg.replace(" ", "."))
        elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
            found.add(".".join(strings[-2:]))
        if isinstance(arg, str):
            strings.append(arg)
    safe = {f"{m}.{n}" for m, n in _TORCH_NAMES} | set(_user_globals) | \
        {"torch.nn.parameter.Parameter"}
    return sorted(found - safe)
