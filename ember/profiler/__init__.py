"""``torch.profiler`` for ember: every dispatched op, backward node and ``record_function``
range becomes a timed event with its input shapes, nested as they ran; results print as
torch's table and export as Chrome traces (Perfetto, chrome://tracing, TensorBoard).

The profiler sits on ``dispatch.hooks.profiler`` (and the backward engine reads the same
hook), so nothing is paid while no profile is active. It records host (CPU) time only: on
CUDA the times are those of the Python side that launches CuPy kernels.

Example:
    >>> import ember
    >>> from ember.profiler import profile, record_function, ProfilerActivity
    >>> x = ember.ones(8, 8, requires_grad=True)
    >>> with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
    ...     with record_function("step"):
    ...         (x * 2).sum().backward()
    >>> {"step", "aten::mul", "MulBackward0"} <= {e.name for e in prof.events()}
    True
    >>> print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=3))  # doctest: +SKIP
"""
import contextlib
import enum
import functools
import gzip
import itertools
import json
import os
import socket
import sys
import threading
import time
import warnings

from .._ops.dispatch import hooks
from ._et import ExecutionTraceObserver  # noqa: F401
from ._events import EventList, FunctionEvent, FunctionEventAvg, chrome_trace  # noqa: F401

__all__ = ["profile", "record_function", "schedule", "ProfilerActivity", "ProfilerAction",
           "DeviceType", "ExecutionTraceObserver", "kineto_available",
           "tensorboard_trace_handler", "supported_activities"]


class ProfilerActivity(enum.Enum):
    """What to profile; ember records host time for every activity."""
    CPU = 0
    CUDA = 1
    XPU = 2
    MTIA = 3
    PrivateUse1 = 4


class DeviceType(enum.IntEnum):
    """The device an event ran on (``FunctionEvent.device_type``), with torch's codes.

    Example:
        >>> from ember.profiler import DeviceType
        >>> int(DeviceType.CUDA), DeviceType(0)
        (1, <DeviceType.CPU: 0>)
    """
    CPU, CUDA, MKLDNN, OPENGL, OPENCL, IDEEP, HIP, FPGA, MAIA, XLA = range(10)
    Vulkan, Metal, XPU, MPS, Meta, HPU, VE, Lazy, IPU, MTIA, PrivateUse1 = range(10, 21)


def kineto_available():
    """False: ember's profiler is its own (host time, Chrome traces), not PyTorch's Kineto
    library, which also traces GPU kernels.

    Example:
        >>> import ember
        >>> ember.profiler.kineto_available()
        False
    """
    return False


class ProfilerAction(enum.Enum):
    """What the profiler does during a step, as a :func:`schedule` decides."""
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def supported_activities():
    """The activities ember can record: CPU (host time)."""
    return {ProfilerActivity.CPU}


def schedule(*, wait, warmup, active, repeat=0, skip_first=0):
    """A step -> ProfilerAction function: skip ``skip_first`` steps, then cycles of ``wait``
    idle, ``warmup`` (recorded and dropped) and ``active`` recorded steps, the last of which
    hands the trace to ``on_trace_ready``; ``repeat`` cycles (0: until the profile ends).

    Example:
        >>> from ember.profiler import schedule
        >>> s = schedule(wait=1, warmup=1, active=2)
        >>> [s(i).name for i in range(4)]
        ['NONE', 'WARMUP', 'RECORD', 'RECORD_AND_SAVE']
    """
    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise ValueError(f"schedule: invalid arguments wait={wait}, warmup={warmup}, "
                         f"active={active}, repeat={repeat}, skip_first={skip_first} (active "
                         "must be positive, the others non-negative)")
    cycle = wait + warmup + active

    def schedule_fn(step):
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        if repeat > 0 and step // cycle >= repeat:
            return ProfilerAction.NONE
        at = step % cycle
        if at < wait:
            return ProfilerAction.NONE
        if at < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if at < cycle - 1 else ProfilerAction.RECORD_AND_SAVE
    return schedule_fn


def _always_record(step):
    return ProfilerAction.RECORD


_EMBER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Recorder:
    """Collects events; installed as ``hooks.profiler`` while a profile records."""

    def __init__(self, record_shapes, profile_memory, with_stack):
        self.record_shapes, self.profile_memory = record_shapes, profile_memory
        self.with_stack = with_stack
        self.events, self._ids, self._local = [], itertools.count(1), threading.local()
        self.t0_ns, self.wall_us = time.perf_counter_ns(), time.time_ns() / 1e3

    def begin(self, name, category="cpu_op", shapes=None, nest=True):
        """A new event, started now; ``nest=False``: one that outlives the caller's range
        (an async collective, ended when it completes): nothing nests in it, nor it in others.
        """
        st = self._local.__dict__.setdefault("stack", [])
        ev = FunctionEvent(next(self._ids), name, threading.get_native_id(),
                           (time.perf_counter_ns() - self.t0_ns) / 1e3, shapes,
                           self._user_stack() if self.with_stack else None, category=category)
        if st and nest:
            ev.cpu_parent = st[-1]
            st[-1].cpu_children.append(ev)
        if nest:
            st.append(ev)
        self.events.append(ev)
        return ev

    def reset(self):
        self.events.clear()
        self._local.__dict__.get("stack", []).clear()

    def end(self, ev):
        ev.end_us = (time.perf_counter_ns() - self.t0_ns) / 1e3
        st = self._local.__dict__.get("stack", ())
        if st and st[-1] is ev:
            st.pop()
        elif ev in st:
            st.remove(ev)
        if ev.cpu_parent is not None:
            ev.cpu_parent.cpu_memory_usage += ev.cpu_memory_usage

    def __call__(self, opdef, args, kwargs, run):
        """The dispatch hook: time ``run(opdef, args, kwargs)`` as the event aten::<op>."""
        shapes = _shapes(args, kwargs) if self.record_shapes else None
        ev = self.begin("aten::" + opdef.name, "cpu_op", shapes)
        try:
            out = run(opdef, args, kwargs)
            grad_fn = getattr(out, "grad_fn", None)
            if grad_fn is not None:
                ev.sequence_nr = grad_fn.seq      # links the op to its backward node
            if self.profile_memory:
                ev.cpu_memory_usage += _new_bytes(out)
            return out
        finally:
            self.end(ev)

    @contextlib.contextmanager
    def backward(self, node):
        """The engine hook: ``with prof.backward(node):`` runs one backward node inside torch's
        two named ranges. (A context, not a call that passes the gradients on: an extra
        reference to a leaf's gradient would make its AccumulateGrad clone it.)"""
        name = node.name()
        outer = self.begin(f"autograd::engine::evaluate_function: {name}")
        inner = self.begin(name)
        seq = getattr(node, "seq", -1)
        outer.sequence_nr = inner.sequence_nr = seq if seq != float("inf") else -1
        try:
            yield
        finally:
            self.end(inner)
            self.end(outer)

    def _user_stack(self):
        """The caller's frames outside ember, innermost first, as "file(line): function"."""
        out, f = [], sys._getframe(2)
        while f is not None:
            code = f.f_code
            if not code.co_filename.startswith(_EMBER_DIR):
                out.append(f"{code.co_filename}({f.f_lineno}): {code.co_name}")
            f = f.f_back
        return out


def _shapes(args, kwargs):
    vals = list(args) + list((kwargs or {}).values())
    return [list(a.shape) if hasattr(a, "_data") else
            [list(t.shape) for t in a] if type(a) in (list, tuple) and a and
            hasattr(a[0], "_data") else [] for a in vals]


def _new_bytes(out):
    """Bytes of the tensors an op made (views share their base's memory: none)."""
    outs = out if type(out) in (tuple, list) else (out,)
    return sum(o._data.nbytes for o in outs if getattr(o, "_base", 0) is None)


class profile:
    """Profile the ops run inside ``with profile(...) as prof:`` (or between ``start()`` and
    ``stop()``); see https://pytorch.org/docs/stable/profiler.html.

    Args:
        activities (iterable of ProfilerActivity): accepted for torch compatibility; ember
            records host time for all of them. Default: CPU.
        schedule (callable): step -> ProfilerAction (see :func:`schedule`); ``prof.step()``
            advances it. Default: record everything.
        on_trace_ready (callable): called with the profiler when a recording ends (e.g.
            :func:`tensorboard_trace_handler`).
        record_shapes (bool): keep each op's input shapes. Default: False.
        profile_memory (bool): count the bytes of the tensors each op makes. Default: False.
        with_stack (bool): keep the Python call stack (frames outside ember). Default: False.

    Example:
        >>> import ember
        >>> with ember.profiler.profile() as prof:
        ...     y = ember.ones(4) + 1
        >>> [e.name for e in prof.events()]
        ['aten::add']
    """

    def __init__(self, *, activities=None, schedule=None, on_trace_ready=None,
                 record_shapes=False, profile_memory=False, with_stack=False, with_flops=False,
                 with_modules=False, experimental_config=None, execution_trace_observer=None,
                 acc_events=False, use_cuda=None, custom_trace_id_callback=None):
        acts = set(activities) if activities is not None else {ProfilerActivity.CPU}
        bad = [a for a in acts if not isinstance(a, ProfilerActivity)]
        if bad:
            raise ValueError(f"profile: activities must be ProfilerActivity members, got {bad}")
        self.activities, self.schedule = acts, schedule or _always_record
        self.on_trace_ready = on_trace_ready
        self.record_shapes, self.profile_memory = record_shapes, profile_memory
        self.with_stack = with_stack
        self.step_num, self.current_action = 0, ProfilerAction.NONE
        self._rec = self._step_ev = None
        self._events = EventList((), profile_memory)
        self._base_us, self._metadata = 0.0, {}
        self._stepped = schedule is not None

    # -- lifecycle ------------------------------------------------------------------------
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        """Begin profiling at step 0."""
        self.step_num = 0
        self.current_action = self.schedule(0)
        self._transition(ProfilerAction.NONE, self.current_action)

    def stop(self):
        """End profiling; a recording in progress is handed to ``on_trace_ready``."""
        self._transition(self.current_action, None)
        self.current_action = ProfilerAction.NONE

    def step(self):
        """Mark the end of a training step: advance the schedule (opens ``ProfilerStep#N``)."""
        prev = self.current_action
        self.step_num += 1
        self._stepped = True
        new = self.current_action = self.schedule(self.step_num)
        if prev in (ProfilerAction.WARMUP, ProfilerAction.RECORD) and new in _RECORDING:
            if prev is ProfilerAction.WARMUP and new is not prev:
                self._rec.reset()              # warm-up events are dropped
                self._step_ev = None
            self._open_step()                  # the same recording goes on: a new step range
        else:
            self._transition(prev, new)

    def _transition(self, prev, new):
        if prev in _RECORDING:
            if prev is ProfilerAction.WARMUP:
                self._stop_recording(save=False)
            else:
                if prev is ProfilerAction.RECORD and new is not None:
                    warnings.warn("profiler schedule: RECORD followed by NONE; the trace is "
                                  "saved at this step", stacklevel=3)
                self._stop_recording(save=True)
        if new in _RECORDING:
            self._start_recording()

    def _start_recording(self):
        if hooks.profiler is not None:
            raise RuntimeError("profile: the profiler is already enabled (profiles do not nest)")
        self._rec = _Recorder(self.record_shapes, self.profile_memory, self.with_stack)
        self._base_us = self._rec.wall_us
        hooks.profiler = self._rec
        if self._stepped:
            self._open_step()

    def _open_step(self):
        if self._step_ev is not None:
            self._rec.end(self._step_ev)
        self._step_ev = self._rec.begin(f"ProfilerStep#{self.step_num}", "user_annotation")

    def _stop_recording(self, save):
        if self._step_ev is not None:
            self._rec.end(self._step_ev)
            self._step_ev = None
        hooks.profiler = None
        if save:
            self._events = EventList(self._rec.events, self.profile_memory)
            if self.on_trace_ready is not None:
                self.on_trace_ready(self)
        self._rec = None

    # -- results --------------------------------------------------------------------------
    def events(self):
        """Every event of the last recording (nested ones too), in start order."""
        return self._events

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0,
                     group_by_overload_name=False):
        """Events averaged per name (and input shapes / stack): ``.table(sort_by=...)``."""
        return self._events.key_averages(group_by_input_shape, group_by_stack_n)

    def export_chrome_trace(self, path):
        """Write the last recording as a Chrome trace (``.json``, or gzipped if ``.gz``)."""
        doc = chrome_trace(self._events, self._base_us)
        doc.update(self._metadata)
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(path, "wt") as fh:
            json.dump(doc, fh)
        return path

    def add_metadata(self, key, value):
        """Add a string ``key: value`` pair to the exported trace."""
        self._metadata[key] = value

    def add_metadata_json(self, key, value):
        """Add ``key`` with a JSON-encoded ``value`` to the exported trace."""
        self._metadata[key] = json.loads(value)


_RECORDING = (ProfilerAction.WARMUP, ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


class record_function:
    """Label a region: ops inside become its children in tables and traces. A context
    manager and a decorator; costs nothing while no profile records.

    Example:
        >>> import ember
        >>> @ember.profiler.record_function("double")
        ... def double(x):
        ...     return x * 2
        >>> with ember.profiler.profile() as prof:
        ...     y = double(ember.ones(3))
        >>> [(e.name, [c.name for c in e.cpu_children]) for e in prof.events()][0]
        ('double', ['aten::mul'])
    """

    def __init__(self, name, args=None):
        self.name, self.args = name, args
        self._rec = self._ev = None

    def __enter__(self):
        rec = self._rec = hooks.profiler
        if rec is not None:
            self._ev = rec.begin(self.name, "user_annotation")
        return self

    def __exit__(self, *exc):
        if self._ev is not None:
            self._rec.end(self._ev)
            self._rec = self._ev = None
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with record_function(self.name, self.args):
                return fn(*args, **kwargs)
        return wrapped


def tensorboard_trace_handler(dir_name, worker_name=None, use_gzip=False):
    """An ``on_trace_ready`` that writes ``<dir>/<worker>.<ms>.pt.trace.json[.gz]`` as the
    TensorBoard profiler plugin reads.

    Example:
        >>> import ember, tempfile, os
        >>> d = tempfile.mkdtemp()
        >>> with ember.profiler.profile(on_trace_ready=ember.profiler.tensorboard_trace_handler(d)):
        ...     y = ember.ones(2) * 3
        >>> len(os.listdir(d))
        1
    """
    def handler(prof):
        os.makedirs(dir_name, exist_ok=True)
        name = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        ms = time.time_ns() // 1_000_000
        while True:     # two traces within one millisecond must not overwrite each other
            path = os.path.join(dir_name, f"{name}.{ms}.pt.trace.json")
            if not os.path.exists(path) and not os.path.exists(path + ".gz"):
                break
            ms += 1
        prof.export_chrome_trace(path + ".gz" if use_gzip else path)
    return handler
