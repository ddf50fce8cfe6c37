"""``torch.accelerator``: the device-agnostic spelling of ``ember.cuda``'s calls (ember's one
accelerator is CUDA, through CuPy).

Example:
    >>> import ember
    >>> dev = ember.accelerator.current_accelerator(check_available=True)
    >>> (dev is None) == (not ember.accelerator.is_available())
    True
"""
import contextlib
import importlib.util
import sys

from . import cuda as _cuda
from .cuda import device_count, is_available  # noqa: F401


def _check():
    if not _cuda.is_available():
        raise RuntimeError("Cannot access accelerator device when none is available.")
    return _cuda


def current_accelerator(check_available=False):
    """``ember.device("cuda")`` where CuPy is installed (and, with ``check_available``, a GPU
    is usable), else None."""
    from ._device import device
    installed = "cupy" in sys.modules or importlib.util.find_spec("cupy") is not None
    return None if not installed or check_available and not is_available() else device("cuda")


def current_device_index():
    """The index of the current GPU."""
    return _check().current_device()


def set_device_index(device):
    """Make ``device`` (an index, ``"cuda:N"``, an ``ember.device``) the current GPU."""
    _check().set_device(device)


current_device_idx, set_device_idx = current_device_index, set_device_index


@contextlib.contextmanager
def device_index(device):
    """A block in which ``device`` is the current GPU (None: unchanged)."""
    if device is None:
        yield
        return
    with _check().device(device):
        yield


def current_stream(device=None):
    """The current stream of ``device`` (``ember.cuda.Stream``)."""
    return _check().current_stream(device)


def set_stream(stream):
    """Make ``stream`` current on its device."""
    _check().set_stream(stream)


def synchronize(device=None):
    """Wait for all work queued on ``device``."""
    _check().synchronize(device)


def _memory(name):
    def fn(device_index=None):
        return getattr(_check(), name)(device_index)
    fn.__name__, fn.__doc__ = name, f"``ember.cuda.{name}`` of the accelerator."
    return fn


memory_allocated, max_memory_allocated, memory_reserved, max_memory_reserved, memory_stats, \
    reset_peak_memory_stats, reset_accumulated_memory_stats = (_memory(n) for n in (
        "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
        "memory_stats", "reset_peak_memory_stats", "reset_accumulated_memory_stats"))
get_memory_info = _memory("mem_get_info")


def empty_cache():
    """Give the memory pool's unused blocks back to the driver."""
    _cuda.empty_cache()
