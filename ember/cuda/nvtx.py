"""``torch.cuda.nvtx``: NVTX ranges and markers (shown by Nsight Systems) through CuPy's NVTX
bindings, which need CuPy but no GPU.

Example:
    >>> import ember
    >>> try:
    ...     with ember.cuda.nvtx.range("step {}", 1):
    ...         pass
    ... except RuntimeError:
    ...     pass    # CuPy or its NVTX library is not installed
"""
import contextlib
import threading

_depth = threading.local()      # range_push's nesting depth on each thread


def _nvtx():
    try:
        from cupy.cuda import nvtx
    except ImportError:
        nvtx = None
    if nvtx is None or not nvtx.available:
        raise RuntimeError("NVTX functions not installed. Are you sure you have a CUDA build?")
    return nvtx


def range_push(msg):
    """Start a nested range named ``msg``; returns its zero-based depth."""
    _nvtx().RangePush(msg)
    d = _depth.n = getattr(_depth, "n", 0) + 1
    return d - 1


def range_pop():
    """End the innermost range; returns its zero-based depth (-1 when none was open)."""
    nvtx = _nvtx()
    d = getattr(_depth, "n", 0)
    if d == 0:
        return -1
    nvtx.RangePop()
    _depth.n = d - 1
    return d - 1


def range_start(msg):
    """Start a range that may end on another thread; returns its handle for ``range_end``."""
    return _nvtx().RangeStart(msg, 0)


def range_end(range_id):
    """End the range ``range_start`` returned ``range_id`` for."""
    _nvtx().RangeEnd(range_id)


def mark(msg):
    """An instantaneous marker named ``msg``."""
    _nvtx().Mark(msg)


@contextlib.contextmanager
def range(msg, *args, **kwargs):
    """A range around the block, named ``msg.format(*args, **kwargs)``."""
    range_push(msg.format(*args, **kwargs))
    try:
        yield
    finally:
        range_pop()
