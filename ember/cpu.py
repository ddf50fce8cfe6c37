"""``torch.cpu``: the CPU as a device module, for device-agnostic code
(``ember.get_device_module(x.device).synchronize()``).

As in torch, the CPU runs each op to completion before the next, so its streams and events only
stand in for CUDA's: ``synchronize`` has nothing to wait for, an event is always complete, and
``stream(s)`` only makes ``s`` the current stream. See https://pytorch.org/docs/stable/cpu.html.
"""
import contextlib
import functools
import os
import platform
import re
from types import MappingProxyType

__all__ = ["is_available", "is_initialized", "synchronize", "current_device", "current_stream",
           "stream", "set_device", "device_count", "Stream", "StreamContext", "Event",
           "get_capabilities"]


@functools.cache
def get_capabilities():
    """The CPU's instruction-set extensions as torch names them (``avx2``, ``avx512_f``,
    ``sse4_2``... read off NumPy's detection), its ``architecture`` and ``num_logical_cores``.

    Example:
        >>> import os
        >>> caps = ember.cpu.get_capabilities()
        >>> caps["num_logical_cores"] == os.cpu_count()
        True
    """
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:     # NumPy 1.x
        from numpy.core._multiarray_umath import __cpu_features__ as features
    caps = {}
    for name, present in features.items():
        if re.fullmatch(r"X86_V\d|AVX512_[A-Z]{3}", name):   # (NumPy's groups of features)
            continue
        name = re.sub(r"^SSE4(\d)$", r"SSE4_\1", name)
        caps[re.sub(r"^AVX512(?!_)", "AVX512_", name).lower()] = bool(present)
    caps.update(architecture=platform.machine(), num_logical_cores=os.cpu_count())
    return MappingProxyType(caps)


def is_available():
    """Always True."""
    return True


def is_initialized():
    return True


def device_count():
    """Always 1: ember treats the CPU as one device."""
    return 1


def current_device():
    return "cpu"


def set_device(device):
    """Nothing to select: there is one CPU device."""


def synchronize(device=None):
    """Nothing to wait for: CPU ops complete before they return."""


class Stream:
    """Stands in for a CUDA stream: CPU work runs in order as it is issued."""

    def __init__(self, priority=-1):
        """(``priority`` is accepted as CUDA's streams take it; CPU work has none.)"""

    def wait_stream(self, stream):
        """Nothing to wait for: the other stream's work is complete."""

    def record_event(self):
        """Nothing to record: CPU work is complete when it is issued."""

    def wait_event(self, event):
        """Nothing to wait for: an event is always complete."""


class Event:
    """Stands in for a CUDA event: the work before it is always complete."""

    def query(self):
        return True

    def record(self, stream=None):
        """Nothing to record: the work before it is complete."""

    def synchronize(self):
        """Nothing to wait for: the event is complete."""

    def wait(self, stream=None):
        """Nothing to wait for: the event is complete."""


_default_stream = Stream()
_current = [_default_stream]


def current_stream(device=None):
    """The stream ``stream(...)`` made current, else the default one.

    Example:
        >>> s = ember.cpu.Stream()
        >>> with ember.cpu.stream(s):
        ...     ember.cpu.current_stream() is s
        True
    """
    return _current[0]


class StreamContext(contextlib.AbstractContextManager):
    """Makes ``stream`` current inside the block (``None`` changes nothing)."""

    def __init__(self, stream):
        self.stream, self.prev_stream = stream, _default_stream

    def __enter__(self):
        if self.stream is not None:
            self.prev_stream, _current[0] = _current[0], self.stream

    def __exit__(self, *exc):
        if self.stream is not None:
            _current[0] = self.prev_stream


def stream(stream):
    """``StreamContext(stream)``."""
    return StreamContext(stream)
