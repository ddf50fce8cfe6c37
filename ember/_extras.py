"""Top-level names torch keeps beside its ops: device-generic ``Stream``/``Event`` (for the
cpu and meta devices here), the exception classes programs catch, build flags, and the eager
forms of the control-flow operators ``cond`` and ``while_loop``. Loaded on first use."""
from ._device import device as _device

__all__ = ["Stream", "Event", "OutOfMemoryError", "AcceleratorError", "FatalError",
           "JITException", "cond", "while_loop", "init_num_threads",
           "profiler_allow_cudagraph_cupti_lazy_reinit_cuda12"]


def profiler_allow_cudagraph_cupti_lazy_reinit_cuda12():
    """torch's build flag: whether its profiler may re-initialize CUPTI lazily under CUDA
    graphs with CUDA 12 (True in torch's builds; ember's profiler uses no CUPTI, so the flag
    changes nothing here)."""
    return True


class OutOfMemoryError(RuntimeError):
    """An allocation on a device failed (``torch.OutOfMemoryError``, which
    ``torch.cuda.OutOfMemoryError`` names too)."""


class AcceleratorError(RuntimeError):
    """An error the accelerator's runtime reported (``torch.AcceleratorError``)."""


class FatalError(Exception):
    """An unrecoverable internal error (``torch.FatalError``)."""


class JITException(Exception):
    """An error raised by TorchScript code (``torch.JITException``)."""


def _check(device):
    d = _device("cpu" if device is None else device)
    if d.type not in ("cpu", "meta"):
        raise RuntimeError(f"{d.type} streams and events are ember.{d.type}.Stream/Event; "
                           "ember.Stream and ember.Event serve the cpu and meta devices")
    return d


class Stream:
    """A device-generic stream: on the cpu work runs in order as issued, so waiting is
    immediate, and (as in torch) the cpu cannot record events.

    Example:
        >>> import ember
        >>> s = ember.Stream()
        >>> s, s.query()
        (torch.Stream device_type=cpu, device_index=-1, stream_id=0, True)
    """

    def __init__(self, device=None, *, priority=0):
        self.device, self.stream_id, self.priority = _check(device), 0, priority

    device_index = property(lambda self: -1 if self.device.index is None else self.device.index)
    device_type = property(lambda self: {"cpu": 0, "meta": 9}[self.device.type])

    def query(self):
        """Whether all work on the stream is done (always, on the cpu)."""
        return True

    def synchronize(self):
        """Wait for the stream's work (none is pending on the cpu)."""

    def wait_event(self, event):
        """Make the stream wait for ``event`` (recorded work is complete on the cpu)."""

    def record_event(self, event=None):
        raise RuntimeError(f"{self.device.type} backend doesn't support events.")

    def wait_stream(self, stream):
        raise RuntimeError(f"{self.device.type} backend doesn't support events.")

    def __eq__(self, other):
        return isinstance(other, Stream) and (self.device, self.stream_id) == \
            (other.device, other.stream_id)

    def __hash__(self):
        return hash((self.device, self.stream_id))

    def __repr__(self):
        return (f"torch.Stream device_type={self.device.type}, device_index={self.device_index}"
                f", stream_id={self.stream_id}")


class Event:
    """A device-generic event: on the cpu nothing is pending, and recording is refused as
    torch refuses it.

    Example:
        >>> import ember
        >>> e = ember.Event()
        >>> e.query(), e
        (True, torch.Event device_type=cpu, device_index=-1, event_flag=0, event_id=0)
    """

    def __init__(self, device=None, *, enable_timing=False, blocking=False, interprocess=False):
        self.device, self.event_id = _check(device), 0
        self._timing = enable_timing

    def query(self):
        """Whether the work before the event is done (always, on the cpu)."""
        return True

    def record(self, stream=None):
        raise RuntimeError(f"{self.device.type} backend doesn't support events.")

    def wait(self, stream=None):
        """Make ``stream`` wait for this event (nothing pending on the cpu)."""

    def synchronize(self):
        """Wait for the event (nothing pending on the cpu)."""

    def elapsed_time(self, end_event):
        if not (self._timing and end_event._timing):
            raise ValueError("Both events must be created with argument 'enable_timing=True'.")
        raise RuntimeError(f"{self.device.type} backend doesn't support events.")

    def __repr__(self):
        idx = -1 if self.device.index is None else self.device.index
        return (f"torch.Event device_type={self.device.type}, device_index={idx}, "
                f"event_flag={int(self._timing)}, event_id={self.event_id}")


def cond(pred, true_fn, false_fn, operands=()):
    """``true_fn(*operands)`` if ``pred`` else ``false_fn(*operands)``: torch's control-flow
    operator, run eagerly (``pred`` a bool, a number or a one-element tensor).

    Example:
        >>> import ember
        >>> x = ember.ones(2)
        >>> ember.cond(x.sum() > 1, lambda a: a + 1, lambda a: a - 1, (x,))
        tensor([2., 2.])
    """
    from ._tensor import Tensor
    if isinstance(pred, Tensor):
        if pred.numel() != 1:
            raise RuntimeError(f"Expected pred to be bool or single-element tensor, but got "
                               f"{pred}.")
        pred = bool(pred.item())
    elif not isinstance(pred, (bool, int, float)):
        raise RuntimeError(f"Expected pred to be bool or tensor, but got {pred}.")
    if not callable(true_fn) or not callable(false_fn):
        raise RuntimeError("Expect both branches to be callable.")
    if not isinstance(operands, (tuple, list)):
        raise RuntimeError(f"Expect operands to be a tuple of possibly nested dict/list/tuple "
                           f"that only consists of tensor leaves, but got {operands}.")
    return (true_fn if pred else false_fn)(*operands)


def while_loop(cond_fn, body_fn, carried_inputs):
    """Run ``carried = body_fn(*carried)`` while ``cond_fn(*carried)`` holds; returns the
    final ``carried`` as a tuple (torch's control-flow operator, run eagerly).

    Example:
        >>> import ember
        >>> ember.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * 2),
        ...                  (ember.tensor(0), ember.ones(2)))
        (tensor(3), tensor([8., 8.]))
    """
    if not isinstance(carried_inputs, (tuple, list)):
        raise RuntimeError(f"carried_inputs must be a tuple or list, got {type(carried_inputs)}")
    carried = tuple(carried_inputs)
    while bool(cond_fn(*carried)):
        out = body_fn(*carried)
        carried = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    return carried


def init_num_threads():
    """Set up the intra-op thread pool of the calling thread: ember's pools start on first
    use, so there is nothing to do (as torch on a thread that already ran ops)."""
