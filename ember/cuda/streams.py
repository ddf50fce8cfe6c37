"""CUDA streams and events (``torch.cuda.Stream``, ``Event``, ``stream()``), over CuPy's.

CuPy launches every kernel and copy on its thread's current stream (``with cupy_stream:``), so
making an ember stream current makes every ember op in the block run on it.
"""
from . import _index, _lazy_init


class Stream:
    """A CUDA stream: a queue of kernels that run in order, concurrently with other streams.

    Args:
        device: the GPU (index, ``"cuda:N"``); the current one by default.
        priority (int): lower is higher priority (0 is the default).

    Example:
        >>> import ember
        >>> if ember.cuda.is_available():
        ...     s = ember.cuda.Stream()
        ...     with ember.cuda.stream(s):
        ...         y = ember.ones(4, device="cuda") * 2
        ...     ember.cuda.current_stream().wait_stream(s)
    """

    def __init__(self, device=None, priority=0, **kwargs):
        cupy = _lazy_init()
        idx = _index(device)
        # NOTE: torch's streams do not synchronize with the legacy default stream (they are
        # made non-blocking): nor do ember's
        with cupy.cuda.Device(idx):
            self._s = cupy.cuda.Stream(non_blocking=True, priority=priority)
        self.device_index, self.priority = idx, priority

    @classmethod
    def _of(cls, s, idx):
        """An ember ``Stream`` over CuPy stream ``s`` (the null stream, or the current one)."""
        self = cls.__new__(cls)
        self._s, self.device_index, self.priority = s, idx, getattr(s, "priority", 0)
        return self

    @property
    def device(self):
        from .._device import device
        return device("cuda", self.device_index)

    @property
    def cuda_stream(self):
        """The ``cudaStream_t`` handle as an int (0: the default stream)."""
        return self._s.ptr

    def query(self):
        """Whether all work queued on the stream has finished."""
        return self._s.done

    def synchronize(self):
        """Wait for all work queued on the stream."""
        self._s.synchronize()

    def wait_event(self, event):
        """Make future work on this stream wait for ``event`` (the host does not wait)."""
        self._s.wait_event(event._e)

    def wait_stream(self, stream):
        """Make future work on this stream wait for all work queued on ``stream`` so far."""
        self.wait_event(stream.record_event())

    def record_event(self, event=None):
        """Record ``event`` (a new one if None) on this stream and return it."""
        event = Event() if event is None else event
        event.record(self)
        return event

    def __enter__(self):
        self._s.__enter__()
        return self

    def __exit__(self, *exc):
        return self._s.__exit__(*exc)

    def __cuda_stream__(self):
        """CUDA's stream protocol: ``(0, handle)``, for libraries that take foreign streams."""
        return 0, self.cuda_stream

    def __eq__(self, other):
        return isinstance(other, Stream) and (self.cuda_stream, self.device_index) == \
            (other.cuda_stream, other.device_index)

    def __hash__(self):
        return hash((self.cuda_stream, self.device_index))

    def __repr__(self):
        return f"<torch.cuda.Stream device={self.device} cuda_stream={self.cuda_stream:#x}>"


class _Handle:
    """A raw ``cudaStream_t`` in CUDA's stream protocol, for CuPy's ``Stream.from_external``."""

    def __init__(self, ptr):
        self.ptr = ptr

    def __cuda_stream__(self):
        return 0, self.ptr


def _cupy_stream(cupy, ptr):
    """A CuPy stream over the raw handle ``ptr`` (CuPy's null stream for 0)."""
    return cupy.cuda.Stream.null if ptr == 0 else cupy.cuda.Stream.from_external(_Handle(ptr))


class ExternalStream(Stream):
    """A stream made elsewhere (by another library, or C++), from its ``cudaStream_t``
    handle as an int: ember queues work on it but never destroys it.

    Args:
        stream_ptr (int): the handle.
        device: the GPU the stream belongs to (the current one by default).

    Example:
        >>> import ember
        >>> if ember.cuda.is_available():
        ...     s = ember.cuda.Stream()
        ...     ext = ember.cuda.ExternalStream(s.cuda_stream)
        ...     assert ext == s
    """

    def __init__(self, stream_ptr, device=None, **kwargs):
        cupy = _lazy_init()
        idx = _index(device)
        with cupy.cuda.Device(idx):
            self._s = _cupy_stream(cupy, int(stream_ptr))
        self.device_index = idx
        self.priority = getattr(self._s, "priority", 0) if stream_ptr else 0


def get_stream_from_external(data_ptr, device=None):
    """An ``ExternalStream`` over the ``cudaStream_t`` handle ``data_ptr`` (an int).

    Example:
        >>> import ember
        >>> if ember.cuda.is_available():
        ...     s = ember.cuda.get_stream_from_external(ember.cuda.Stream().cuda_stream)
    """
    return ExternalStream(data_ptr, device)


class Event:
    """A CUDA event: a marker in a stream, to wait on or to time work with.

    Example:
        >>> import ember
        >>> if ember.cuda.is_available():
        ...     start, end = ember.cuda.Event(enable_timing=True), ember.cuda.Event(True)
        ...     start.record(); y = ember.ones(1 << 20, device="cuda").sum(); end.record()
        ...     end.synchronize(); ms = start.elapsed_time(end)
    """

    def __init__(self, enable_timing=False, blocking=False, interprocess=False, external=False):
        cupy = _lazy_init()
        self._e = cupy.cuda.Event(block=blocking, disable_timing=not enable_timing,
                                  interprocess=interprocess)
        self.enable_timing, self._recorded = enable_timing, False

    cuda_event = property(lambda self: self._e.ptr)

    def record(self, stream=None):
        """Record the event on ``stream`` (the current stream by default)."""
        self._e.record((stream or current_stream())._s)
        self._recorded = True

    def wait(self, stream=None):
        """Make ``stream`` (the current one by default) wait for this event."""
        (stream or current_stream()).wait_event(self)

    def query(self):
        """Whether the work recorded before the event has finished (True if never recorded)."""
        return not self._recorded or self._e.done

    def synchronize(self):
        """Wait (on the host) until the event has happened."""
        if self._recorded:
            self._e.synchronize()

    def elapsed_time(self, end_event):
        """Milliseconds between this event's record and ``end_event``'s."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if not (self._recorded and end_event._recorded):
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return _lazy_init().cuda.get_elapsed_time(self._e, end_event._e)

    def __repr__(self):
        return f"<torch.cuda.Event {self.cuda_event:#x}>" if self._recorded else \
            "<torch.cuda.Event uninitialized>"


def current_stream(device=None):
    """The stream ember's ops on ``device`` (the current GPU by default) run on now.

    Example:
        >>> import ember
        >>> ember.cuda.current_stream() == ember.cuda.default_stream() if \\
        ...     ember.cuda.is_available() else True
        True
    """
    cupy, idx = _lazy_init(), _index(device)
    return Stream._of(cupy.cuda.get_current_stream(idx), idx)


def default_stream(device=None):
    """The device's default (null) stream, ``cuda_stream == 0``."""
    cupy, idx = _lazy_init(), _index(device)
    return Stream._of(cupy.cuda.Stream.null, idx)


def set_stream(stream):
    """Make ``stream`` current on its device (None: no change)."""
    if stream is not None:
        stream._s.use()


class StreamContext:
    """``with ember.cuda.stream(s):``: ops in the block run on ``s`` (None: unchanged)."""

    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        if self.stream is not None:
            self.stream.__enter__()
        return self.stream

    def __exit__(self, *exc):
        return False if self.stream is None else self.stream.__exit__(*exc)


def stream(stream):
    """A context manager in which ops run on ``stream`` (torch.cuda.stream)."""
    return StreamContext(stream)


_pending = []        # (event, array): arrays a side stream still reads, kept until it is done


def record_stream(self, stream):
    """Tell the memory pool that ``stream`` uses this tensor: its memory is not reused until
    the work queued on ``stream`` so far has finished.

    NOTE: CuPy's pool hands a freed block back to the stream that allocated it; ember keeps
    the array alive until an event recorded on ``stream`` now has happened, which is what
    torch's caching allocator does with the block.

    Example:
        >>> import ember
        >>> if ember.cuda.is_available():
        ...     ember.ones(2, device="cuda").record_stream(ember.cuda.current_stream())
    """
    if not isinstance(stream, Stream):
        raise RuntimeError("unknown parameter type")
    if self.device.type != "cuda":
        return
    _pending[:] = [p for p in _pending if not p[0].query()]
    _pending.append((stream.record_event(), self._data))
