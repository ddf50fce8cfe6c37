"""TEST DOUBLE of ember's ``cuda`` device: no GPU, no CuPy, nothing here runs on a GPU.

``cuda_double()`` installs, for the length of a ``with`` block (a test's fixture), a fake CuPy
whose arrays are NumPy arrays in a wrapper, ``DeviceArray``, that refuses to become a NumPy
array as CuPy's do: ``numpy.asarray(a)`` raises CuPy's TypeError ("Implicit conversion to a
NumPy array is not allowed"), and so does any ``numpy.<function>(a)`` or ``numpy.<ufunc>(a)``
(CuPy would dispatch some of those to itself; the double is stricter on purpose, so that code
calling NumPy instead of the backend's ``xp`` fails loudly). A host ``numpy.ndarray`` given to
an ``xp`` function or mixed into arithmetic with a device array raises too, as in CuPy. The
wrapped ``xp`` forwards everything else to NumPy, so results are the CPU's, bit for bit.

ember's real cuda backend (``ember._backends.cupy_backend.CupyBackend``) runs unchanged on it:
the double replaces only the module it imports (``xp``, ``cupyx``) and what ``ember.cuda``
asks of the driver (one device, "ember test double").

It also models, as CuPy's documentation states them, the parts of CuPy that ember's
``ember.cuda`` wraps: the memory pool (``MemoryPool``: 512-byte rounding, best-fit reuse of
freed blocks, ``set_limit``, ``OutOfMemoryError`` once the limit or the device's memory is
reached, ``free_all_blocks``; every new device array is allocated through the current
allocator, ``cupy.cuda.set_allocator``), streams (``Stream``, ``Stream.null``,
``get_current_stream``, ``with stream:``) and events (``Event``, ``get_elapsed_time``). Its
work is synchronous, so every stream and event is always done and an elapsed time is the wall
time between two records.

What it proves: op forwards and backwards, device moves and the training plumbing go through
the backend on a cuda tensor; ember's memory, stream and event bookkeeping against the pool's
and driver's answers. What it does not: that CuPy has every function ember calls with the
same signature, numerics of GPU kernels, real concurrency, nor ember's CUDA C kernels: the
double has no ``RawKernel``, so the fused kernels are off on it, except inside
``cuda_emulator.emulated_kernels`` (tests/test_cuda_kernels.py), which runs their CUDA C on the
cpu.
"""
import bisect
import contextlib
import functools
import itertools
import json
import os
import sys
import threading
import time
import types
import warnings
import weakref

import numpy as np
import pytest

# The names CuPy 14.2.0 has (``dir()`` of cupy, cupy.linalg, cupy.fft, cupy.random, cupyx,
# cupy.ndarray) and its functions' and methods' keyword parameters ("signatures", from their
# signatures or docstrings), read from the installed package: the double refuses any other
# name (AttributeError) or keyword (TypeError), as CuPy would, so that ember calling what CuPy
# lacks fails here and not first on a GPU. The lists of cupy.cuda, its runtime, device and
# nvrtc modules, Stream, MemoryPool and graph.Graph check that the parts modelled by hand
# below are CuPy's (test_cuda_names.py).
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "cupy_names.json")) as _f:
    _names = json.load(_f)
_SIGNATURES = {k: frozenset(v) for k, v in _names.pop("signatures").items()}
CUPY_NAMES = {k: frozenset(v) for k, v in _names.items()}
IMPLICIT = ("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to "
            "construct a NumPy array explicitly.")
HOST_OK = frozenset({"asarray", "array", "asanyarray"})      # xp functions that take host data


class Device:
    """``cupy.cuda.Device``: a context manager naming a GPU (the double has one, id 0)."""

    def __init__(self, id=0):
        if int(id) != 0:
            raise RuntimeError(f"cudaErrorInvalidDevice: invalid device ordinal {id}")
        self.id = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def use(self):
        pass

    def synchronize(self):
        pass


def _host(x, name):
    raise TypeError(f"Unsupported type {type(x)} for {name}: a host numpy.ndarray given to a "
                    "cuda (test double) array operation")


def unwrap(x, name="xp", host_ok=False):
    """The NumPy array inside a device array (recursing into lists, tuples and dicts)."""
    t = type(x)
    if t is DeviceArray:
        return x._a
    if t is np.ndarray and not host_ok:
        _host(x, name)
    if t in (list, tuple):
        return t(unwrap(v, name, host_ok) for v in x)
    if t is dict:
        return {k: unwrap(v, name, host_ok) for k, v in x.items()}
    return x


_wrappers = weakref.WeakValueDictionary()     # id(ndarray) -> its live DeviceArray


def wrap(r):
    """A NumPy result as the device's: arrays and NumPy scalars become device arrays (CuPy's
    reductions give 0-dim arrays), tuples and lists element by element. One ndarray has one
    wrapper while that lives, so ``a.base is b.base`` holds as it does for CuPy's views."""
    if isinstance(r, np.ndarray):
        w = _wrappers.get(id(r))
        if w is None or w._a is not r:
            _allocate(r)
            w = _wrappers[id(r)] = DeviceArray(r)
        return w
    if isinstance(r, np.generic):
        return wrap(np.asarray(r))
    if isinstance(r, (tuple, list)):
        items = [wrap(v) for v in r]
        return type(r)(*items) if hasattr(r, "_fields") else type(r)(items)
    return r


def _capturing():
    return getattr(get_current_stream(), "_graph", None) is not None


def _not_capturing():
    """What the driver answers a call that waits for the GPU, or copies from pageable host
    memory, on a stream being captured."""
    if _capturing():
        raise CUDARuntimeError(900)


def _poison(o):
    """A new output of a captured kernel: real CUDA runs nothing during a capture, so it
    holds garbage until the graph is replayed (NaN here; 0 in integers and False in booleans,
    which stay valid indices for the kernels captured after it)."""
    try:
        o[...] = np.nan if o.dtype.kind in "fc" else 0
    except ValueError:          # (a read-only broadcast view)
        pass


def _copy_into(old, new):
    if isinstance(old, np.ndarray) and new is not old:
        # (an output reshaped in place since, ``a.shape = ...``: the same memory)
        old[...] = new if new.shape == old.shape else new.reshape(old.shape)
    elif isinstance(old, (tuple, list)):
        for o, n in zip(old, new):
            _copy_into(o, n)


def _captured(run, inputs, targets):
    """Run one "kernel" (``run()``, NumPy on NumPy arrays). While the current stream is being
    captured, record it for the graph instead, as CUDA does: the graph's replay runs it again
    on the same arrays (copying its new results into the ones returned now); now, outputs
    are garbage and in-place ``targets`` keep their values."""
    graph = getattr(get_current_stream(), "_graph", None)
    if graph is None:
        return run()
    saved = [t.copy() for t in targets]
    r = run()
    r = np.asarray(r) if isinstance(r, np.generic) else r
    graph.append((run, None if targets else r))
    for t, v in zip(targets, saved):
        t[...] = v
    arrays = [x for x in inputs if isinstance(x, np.ndarray)]
    for o in (r if isinstance(r, (tuple, list)) else (r,)):
        if isinstance(o, np.ndarray) and not targets and \
                not any(np.may_share_memory(o, x) for x in arrays):
            _poison(o)
    return r


# CuPy functions whose output's size depends on the data: they read the GPU (a sync)
_DATA_SIZED = frozenset({"nonzero", "argwhere", "flatnonzero", "unique", "compress", "extract",
                         "ndarray.nonzero", "ndarray.compress"})


def _call(fn, name, host_ok=False, where=None):
    params = _SIGNATURES.get(where or name)

    def call(*args, **kwargs):
        if name in _DATA_SIZED or name == "where" and len(args) == 1:
            _not_capturing()
        bad = params is not None and next((k for k in kwargs if k not in params), None)
        if bad:
            raise TypeError(f"{name}() got an unexpected keyword argument '{bad}'")
        args, kwargs = unwrap(args, name, host_ok), unwrap(kwargs, name, host_ok)
        # CuPy never warns of a floating-point condition (0/0, the mean of nothing): nor do we
        def run():
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                return fn(*args, **kwargs)
        out, owner = kwargs.get("out"), getattr(fn, "__self__", None)  # (a method's array)
        return wrap(_captured(run, args + (owner,), [out] if isinstance(out, np.ndarray) else []))
    call.__name__ = name
    return call


class DeviceArray:
    """A "GPU" array of the double: a NumPy array that NumPy itself may not touch."""

    __slots__ = ("_a", "__weakref__")
    __array_ufunc__ = None          # numpy.<ufunc>(a) raises; numpy scalars defer to our operators
    __array_priority__ = 10000
    __hash__ = None

    def __init__(self, a):
        object.__setattr__(self, "_a", a)

    def __setattr__(self, name, value):         # (a.real = ..., a.shape = ...)
        setattr(self._a, name, unwrap(value, name))

    def __array__(self, *args, **kwargs):
        raise TypeError(IMPLICIT)

    def __array_function__(self, func, types, args, kwargs):
        raise TypeError(f"numpy.{func.__name__} called on a cuda (test double) array: ember "
                        "must go through the backend's xp, not NumPy")

    @property
    def device(self):
        return Device(0)

    @property
    def data(self):         # cupy.cuda.MemoryPointer: the double's "device" address
        return types.SimpleNamespace(ptr=self._a.__array_interface__["data"][0])

    def get(self, stream=None, order="C", out=None):
        _not_capturing()            # (a copy to the host waits for the GPU)
        return np.array(self._a, copy=True)

    def set(self, arr, stream=None):
        """``cupy.ndarray.set``: copy a host array of the same shape and dtype in."""
        if type(arr) is not np.ndarray:
            raise TypeError("Only numpy.ndarray can be set to cupy.ndarray")
        if arr.shape != self._a.shape:
            raise ValueError(f"Shape mismatch. Old shape: {self._a.shape}, new shape: "
                             f"{arr.shape}")
        if arr.dtype != self._a.dtype:
            raise TypeError(f"{arr.dtype} array cannot be set to {self._a.dtype} array")
        root = arr
        while isinstance(root.base, np.ndarray):
            root = root.base
        if not isinstance(root.base, PinnedMemoryPointer):
            _not_capturing()        # (only a copy from pinned memory can be captured)
        a = self._a
        _captured(lambda: a.__setitem__(Ellipsis, arr), (), [a])

    def __getattr__(self, name):
        if name.startswith("__") or name in ("ctypes", "tobytes", "tofile"):
            raise AttributeError(f"a cuda (test double) array has no host attribute {name!r}")
        if name not in CUPY_NAMES["cupy.ndarray"]:
            raise AttributeError(f"'cupy.ndarray' object has no attribute '{name}'")
        if name in ("item", "tolist"):
            _not_capturing()        # (reads the GPU's memory: waits for it)
        v = getattr(self._a, name) if name != "take" else functools.partial(self._a.take,
                                                                              mode="wrap")
        return _call(v, f"ndarray.{name}") if callable(v) else wrap(v)

    def __getitem__(self, key):
        a, key = self._a, unwrap(key, "__getitem__", True)
        if any(getattr(k, "dtype", None) == bool for k in (key if type(key) is tuple else
                                                           (key,))):
            _not_capturing()        # (a boolean mask's result size is read from the GPU)
        # (wrapped when it runs: a captured kernel reads the index's contents at replay)
        return wrap(_captured(lambda: a[_wrapped(a.shape, key)], (a,), []))

    def __setitem__(self, key, value):
        if type(value) is np.ndarray:
            _not_capturing()        # (host data: a copy from pageable memory)
        key, value = unwrap(key, "__setitem__", True), unwrap(value, "__setitem__", True)

        def run():
            self._a[_wrapped(self._a.shape, key)] = value
        _captured(run, (value,), [self._a])

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        return (wrap(v) for v in self._a)

    def __repr__(self):
        return f"DeviceArray({self._a!r})"

    def __bool__(self):
        _not_capturing()            # (reads the GPU's memory: waits for it)
        return bool(self._a)

    def __int__(self):
        _not_capturing()            # (reads the GPU's memory: waits for it)
        return int(self._a)

    def __float__(self):
        _not_capturing()            # (reads the GPU's memory: waits for it)
        return float(self._a)

    def __complex__(self):
        _not_capturing()            # (reads the GPU's memory: waits for it)
        return complex(self._a)

    def __index__(self):
        _not_capturing()            # (reads the GPU's memory: waits for it)
        return self._a.__index__()

    def __dlpack__(self, *args, **kwargs):
        raise TypeError("DLPack export of a cuda (test double) array: it has no GPU memory")


def _operator(name):
    def method(self, *others):
        a, others = self._a, unwrap(others, name)
        return wrap(_captured(lambda: getattr(a, name)(*others), (a,) + others, []))
    method.__name__ = name
    return method


def _inplace(name):
    def method(self, other):
        a, other = self._a, unwrap(other, name)
        _captured(lambda: getattr(a, name)(other), (other,), [a])
        return self
    method.__name__ = name
    return method


for _n in ("add sub mul truediv floordiv mod pow matmul and or xor lshift rshift divmod".split()):
    setattr(DeviceArray, f"__{_n}__", _operator(f"__{_n}__"))
    setattr(DeviceArray, f"__r{_n}__", _operator(f"__r{_n}__"))
    if _n != "divmod":
        setattr(DeviceArray, f"__i{_n}__", _inplace(f"__i{_n}__"))
for _n in ("lt le eq ne gt ge neg pos abs invert".split()):
    setattr(DeviceArray, f"__{_n}__", _operator(f"__{_n}__"))


class Namespace(types.ModuleType):
    """A NumPy module (``numpy``, ``numpy.linalg``...) as the double's: its functions and
    ufuncs take and give device arrays; types and constants are NumPy's (CuPy's are too)."""

    def __init__(self, module, name, extra=None):
        super().__init__(name)
        self._module = module
        self.__dict__.update(extra or {})

    def __getattr__(self, name):
        if name not in CUPY_NAMES.get(self.__name__, (name,)):
            raise AttributeError(f"module '{self.__name__}' has no attribute '{name}'")
        v = getattr(self._module, name)
        if isinstance(v, types.ModuleType):
            v = Namespace(v, f"{self.__name__}.{name}")
        elif isinstance(v, np.ufunc):
            v = Ufunc(v)
        elif callable(v) and not isinstance(v, type):
            v = _call(v, name, name in HOST_OK and self._module is np, f"{self.__name__}.{name}")
        setattr(self, name, v)
        return v


class Ufunc:
    """``cupy.ufunc``: calls, and the methods CuPy has (docs/source/reference/ufunc.rst:
    ``outer`` for all, ``at`` for add, maximum and minimum; no reduce, accumulate, reduceat)."""

    def __init__(self, u):
        self._u, self.__name__ = u, u.__name__
        self.nin, self.nout, self.identity = u.nin, u.nout, u.identity

    def __call__(self, *args, **kwargs):
        return _call(self._u, self.__name__)(*args, **kwargs)

    def __getattr__(self, name):
        if name in ("reduce", "accumulate", "reduceat") or name == "at" and \
                self.__name__ not in ("add", "maximum", "minimum"):
            raise NotImplementedError(f"cupy.{self.__name__}.{name} is not supported")
        return _call(getattr(self._u, name), f"{self.__name__}.{name}")


def _asarray(obj, dtype=None, order=None, **kwargs):
    # cupy.asarray copies host data to the device; a device array of the right dtype is itself
    if type(obj) is DeviceArray:
        return obj if dtype is None or obj._a.dtype == dtype else wrap(obj._a.astype(dtype))
    _not_capturing()                # (host data: a copy from pageable memory)
    return wrap(np.array(unwrap(obj, "asarray", True), dtype=dtype, order=order or "K",
                         copy=True))


TOTAL_MEMORY = 1 << 30          # the double's device memory (getDeviceProperties, memGetInfo)


class OutOfMemoryError(MemoryError):
    """``cupy.cuda.memory.OutOfMemoryError``, with CuPy's message."""

    def __init__(self, size, total, limit=0):
        msg = f"Out of memory allocating {size:,} bytes (allocated so far: {total:,} bytes"
        super().__init__(msg + (f", limit set to: {limit:,} bytes)." if limit else ")."))


_ERRORS = {1: ("cudaErrorInvalidValue", "invalid argument"),
           2: ("cudaErrorMemoryAllocation", "out of memory"),
           34: ("cudaErrorNotReady", "device not ready"),
           400: ("cudaErrorInvalidResourceHandle", "invalid resource handle"),
           900: ("cudaErrorStreamCaptureUnsupported",
                 "operation not permitted when stream is capturing")}


class CUDARuntimeError(RuntimeError):
    """``cupy.cuda.runtime.CUDARuntimeError(status)``: "name: description", as CuPy's."""

    def __init__(self, status):
        self.status = status
        name, text = _ERRORS.get(status, ("cudaErrorUnknown", "unknown error"))
        super().__init__(f"{name}: {text}")


class MemoryPointer:
    """``cupy.cuda.MemoryPointer`` from the pool: its block goes back to the pool (not to the
    driver) when the pointer dies, as CuPy's ``PooledMemory`` does."""

    def __init__(self, pool, size):
        self.pool, self.size, self.ptr = pool, size, next(_ids)

    def __del__(self):
        self.pool._release(self.size)


class MemoryPool:
    """``cupy.get_default_memory_pool()`` as CuPy's docs describe it: sizes round up to 512
    bytes; a freed block stays in the pool (``total_bytes`` keeps it) and serves a later
    request of its size or less (best fit, the rest of the block staying free; the double does
    not merge neighbours back); above the limit or the device's memory it frees every cached
    block and retries once before raising ``OutOfMemoryError``."""

    def __init__(self, allocator=None):
        self._used, self._free, self._limit = 0, [], 0
        self._allocator, self._grown = allocator, []    # (what a given allocator gave)

    def malloc(self, size):
        size = -(-int(size) // 512) * 512
        if size == 0:
            return MemoryPointer(self, 0)
        i = bisect.bisect_left(self._free, size)
        if i < len(self._free):
            rest = self._free.pop(i) - size
            if rest:
                bisect.insort(self._free, rest)
        else:
            for attempt in (0, 1):
                total = self.total_bytes()
                if total + size <= (self._limit or TOTAL_MEMORY) and \
                        total + size <= TOTAL_MEMORY:
                    break
                if attempt:
                    raise OutOfMemoryError(size, total, self._limit)
                self.free_all_blocks()
            if self._allocator is not None:
                self._grown.append((size, self._allocator(size)))
        self._used += size
        return MemoryPointer(self, size)

    def _release(self, size):
        if size:
            self._used -= size
            bisect.insort(self._free, size)

    def used_bytes(self):
        return self._used

    def free_bytes(self):
        return sum(self._free)

    def total_bytes(self):
        return self._used + sum(self._free)

    def n_free_blocks(self):
        return len(self._free)

    def free_all_blocks(self, stream=None):
        self._free = []
        while self._grown and sum(n for n, _ in self._grown) > self._used:
            self._grown.pop()

    def set_limit(self, size=None, fraction=None):
        if size is not None and fraction is not None:
            raise ValueError("size and fraction cannot be specified at the same time")
        if fraction is not None:
            if not 0 <= fraction <= 1:
                raise ValueError(f"memory limit fraction out of range: {fraction}")
            size = int(TOTAL_MEMORY * fraction)
        self._limit = int(size or 0)

    def get_limit(self):
        return self._limit


_owners = {}        # id(root ndarray) -> the MemoryPointer its memory came from


def _allocate(a):
    """Allocate the memory of a new device array through the current allocator (as every
    CuPy array's is), released when the array's root buffer dies. CuPy has no bfloat16 nor
    float8 (ml_dtypes' NumPy types; cupy/cupy#7527): it refuses them."""
    if a.dtype.type.__module__.startswith("ml_dtypes"):
        raise ValueError(f"Unsupported dtype {a.dtype}")
    root = a
    while isinstance(root.base, np.ndarray):
        root = root.base
    if id(root) in _owners:
        return
    _owners[id(root)] = (getattr(_state.local, "allocator", None) or _state.allocator)(
        root.nbytes)
    weakref.finalize(root, _owners.pop, id(root), None)


_ids = itertools.count(0x7f0000001000, 0x100)       # fake driver handles


class Stream:
    """``cupy.cuda.Stream``: ``ptr`` is 0 for the null stream; ``with stream:`` makes it the
    current stream of its thread until the block ends (CuPy keeps a stack).
    ``begin_capture``/``end_capture`` record the work queued on it into a ``Graph`` (the
    driver's state of the handle: ``from_external`` of a handle sees the same capture)."""

    _graph = None

    def __init__(self, null=False, non_blocking=False, ptds=False, priority=None):
        self.ptr = 0 if null else next(_ids)
        self.device_id = -1 if null else 0
        self.priority = 0 if priority is None else int(priority)
        self.is_non_blocking = bool(non_blocking)
        if self.ptr:
            _handles[self.ptr] = self

    @classmethod
    def from_external(cls, obj):
        version, ptr = obj.__cuda_stream__()
        if ptr not in _handles:
            raise CUDARuntimeError(400)
        return _handles[ptr]

    def begin_capture(self, mode=None):
        if self.ptr in (0, 1):
            raise RuntimeError("cannot capture on the default (legacy) stream")
        if self._graph is not None:
            raise CUDARuntimeError(900)
        self._graph = []

    def end_capture(self):
        if self._graph is None:
            raise CUDARuntimeError(1)
        g, self._graph = Graph(self._graph), None
        return g

    def is_capturing(self):
        return self._graph is not None

    def __enter__(self):
        _stack().append(get_current_stream())
        self.use()
        return self

    def __exit__(self, *exc):
        _stack().pop().use()
        return False

    def use(self):
        _state.local.current = self
        return self

    def synchronize(self):
        if self._graph is not None:
            raise CUDARuntimeError(900)

    @property
    def done(self):
        return True

    def record(self, event=None):
        event = Event() if event is None else event
        event.record(self)
        return event

    def wait_event(self, event):
        pass

    def __eq__(self, other):
        return isinstance(other, Stream) and other.ptr == self.ptr

    def __hash__(self):
        return hash(self.ptr)


_handles = weakref.WeakValueDictionary()       # stream handle -> its Stream
Stream.null = Stream(null=True)


class Graph:
    """``cupy.cuda.graph.Graph``: the kernels captured, replayed in order by ``launch``."""

    def __init__(self, nodes):
        self._nodes, self.graphExec = nodes, next(_ids)

    def launch(self, stream=None):
        for run, out in self._nodes:
            _copy_into(out, run())

    def debug_dot_str(self, flags=0):
        return "digraph dot {\n" + "".join(
            f'  node{i} [label="{getattr(run, "__qualname__", "kernel")}"];\n'
            for i, (run, _) in enumerate(self._nodes)) + "}\n"


def _stack():
    st = getattr(_state.local, "stack", None)
    if st is None:
        st = _state.local.stack = []
    return st


def get_current_stream(device_id=-1):
    """``cupy.cuda.get_current_stream``: the thread's current stream, else the null stream."""
    return getattr(_state.local, "current", None) or Stream.null


class Event:
    """``cupy.cuda.Event``: ``record`` notes the wall time (the double's work is synchronous)."""

    def __init__(self, block=False, disable_timing=False, interprocess=False):
        if interprocess and not disable_timing:
            raise ValueError("Timing must be disabled for interprocess events")
        self.ptr, self.disable_timing, self._t = next(_ids), disable_timing, None

    def record(self, stream=None):
        self._t = time.perf_counter()

    def synchronize(self):
        pass

    @property
    def done(self):
        return True


def get_elapsed_time(start_event, end_event):
    """``cupy.cuda.get_elapsed_time`` in milliseconds; the driver's error for an event made
    without timing or never recorded."""
    if start_event.disable_timing or end_event.disable_timing or \
            start_event._t is None or end_event._t is None:
        raise CUDARuntimeError(400)
    return (end_event._t - start_event._t) * 1e3


class PinnedMemoryPointer(bytearray):
    """``cupy.cuda.PinnedMemoryPointer``: the double's "page-locked" host block."""


def empty_pinned(shape, dtype=float, order="C"):
    """``cupyx.empty_pinned``: a NumPy array over a pinned block."""
    dtype = np.dtype(dtype)
    return np.ndarray(shape, dtype, PinnedMemoryPointer(max(1, int(np.prod(shape)) *
                                                            dtype.itemsize)), order=order)


_pool = MemoryPool()
_state = types.SimpleNamespace(allocator=_pool.malloc, local=threading.local())


@contextlib.contextmanager
def using_allocator(allocator=None):
    """``cupy.cuda.using_allocator``: this thread's allocator inside the block."""
    prev = getattr(_state.local, "allocator", None)
    _state.local.allocator = allocator
    try:
        yield
    finally:
        _state.local.allocator = prev


class _FunctionMemory:
    """The block a ``PythonFunctionAllocator`` gave: ``free_func`` is called when it dies."""

    def __init__(self, ptr, size, free):
        self.ptr, self.size, self._free = ptr, size, free

    def __del__(self):
        self._free(self.ptr, 0)


class PythonFunctionAllocator:
    """``cupy.cuda.PythonFunctionAllocator(malloc_func, free_func)``: ``malloc(size)`` asks
    ``malloc_func(size, device_id)`` for a pointer, freed by ``free_func(ptr, device_id)``."""

    def __init__(self, malloc_func, free_func):
        self._m, self._f = malloc_func, free_func

    def malloc(self, size):
        return _FunctionMemory(self._m(size, 0), size, self._f)


_device_blocks = {}      # runtime.malloc's pointers -> sizes


def _malloc(size):
    ptr = next(_ids)
    _device_blocks[ptr] = size
    return ptr


class ElementwiseKernel:
    """``cupy.ElementwiseKernel``: the double keeps the definition but cannot compile or run
    CUDA C++ (calling it raises NotImplementedError); the GPU tests run it."""

    def __init__(self, in_params, out_params, operation, name="kernel", reduce_dims=True,
                 preamble="", no_return=False, return_tuple=False, **kwargs):
        self.in_params, self.out_params, self.operation = in_params, out_params, operation
        self.name, self.preamble = name, preamble

    def __call__(self, *args, **kwargs):
        raise NotImplementedError("the cuda test double cannot compile CUDA C++ kernels")


def set_allocator(allocator=None):
    """``cupy.cuda.set_allocator``; ``None`` would be the raw driver allocator, which the
    double does not model."""
    if allocator is None:
        raise NotImplementedError("the test double has no allocator without a pool")
    _state.allocator = allocator


_runtime = types.SimpleNamespace(
    getDeviceCount=lambda: 1, getDevice=lambda: 0, setDevice=lambda i: Device(i) and None,
    deviceSynchronize=_not_capturing, CUDARuntimeError=CUDARuntimeError,
    deviceCanAccessPeer=lambda d, p: 0, malloc=_malloc, free=_device_blocks.pop,
    profilerStart=lambda: None, profilerStop=lambda: None, hostRegister=lambda p, n, f: None,
    hostUnregister=lambda p: None, streamCaptureModeGlobal=0, streamCaptureModeThreadLocal=1,
    streamCaptureModeRelaxed=2,
    memGetInfo=lambda: (TOTAL_MEMORY - _pool.total_bytes(), TOTAL_MEMORY),
    getDeviceProperties=lambda i: {"name": b"ember test double", "totalGlobalMem": TOTAL_MEMORY,
                                   "major": 8, "minor": 0, "multiProcessorCount": 1})
def _full(shape, fill_value, dtype=None, order="C"):
    """``cupy.full``: its fill goes through ``cupy.copyto``, which takes a Python or NumPy
    scalar or an array, and reads ``.dtype`` of anything else (so None fails, where NumPy's
    full gives NaN)."""
    if not (isinstance(fill_value, (bool, int, float, complex, np.generic, np.ndarray,
                                    DeviceArray))):
        raise AttributeError(f"'{type(fill_value).__name__}' object has no attribute 'dtype'")
    return wrap(np.full(shape, unwrap(fill_value, "full", True), dtype, order))


cupy = Namespace(np, "cupy", {
    "ndarray": DeviceArray, "asarray": _asarray, "asanyarray": _asarray,
    "array": lambda obj, dtype=None, copy=True, order="K", **kw: _asarray(
        obj.copy() if copy and type(obj) is DeviceArray else obj, dtype, order),
    "asnumpy": lambda a, stream=None, order="C", out=None: a.get() if type(a) is DeviceArray
    else np.asarray(a),
    "get_array_module": lambda *args: cupy, "get_default_memory_pool": lambda: _pool,
    "full": _full, "ElementwiseKernel": ElementwiseKernel,
    # CuPy wraps an out-of-range index around, where NumPy raises (docs: "Out-of-bounds
    # indices"): ember's bounds checks of a GPU index raise later, as torch's device asserts
    "take": _call(lambda a, indices, axis=None, out=None: np.take(a, indices, axis, out,
                                                                  mode="wrap"), "take"),
    "take_along_axis": _call(lambda a, indices, axis: np.take_along_axis(
        a, indices % max(a.shape[axis], 1), axis), "take_along_axis"),
    "cuda": types.SimpleNamespace(
        Device=Device, runtime=_runtime, is_available=lambda: True,
        PinnedMemoryPointer=PinnedMemoryPointer, MemoryPool=MemoryPool,
        MemoryPointer=MemoryPointer, set_allocator=set_allocator,
        get_allocator=lambda: _state.allocator, Stream=Stream, Event=Event,
        get_current_stream=get_current_stream, get_elapsed_time=get_elapsed_time,
        using_allocator=using_allocator, PythonFunctionAllocator=PythonFunctionAllocator,
        alloc=lambda size: (getattr(_state.local, "allocator", None) or _state.allocator)(size),
        graph=types.SimpleNamespace(Graph=Graph),
        nvrtc=types.SimpleNamespace(getSupportedArchs=lambda: (75, 80, 86, 89, 90)),
        device=types.SimpleNamespace(get_cublas_handle=lambda: 0x5100,
                                     get_cusolver_handle=lambda: 0x5200),
        memory=types.SimpleNamespace(OutOfMemoryError=OutOfMemoryError))})


def _wrapped(shape, key):
    """``key`` with its integer arrays' indices wrapped around their axes' sizes, as CuPy's
    integer array indexing does where NumPy raises (CuPy's docs: "Out-of-bounds indices")."""
    keys = key if type(key) is tuple else (key,)
    if any(k is None or k is Ellipsis or getattr(k, "dtype", None) == bool for k in keys) or \
            len(keys) > len(shape):
        return key
    keys = tuple(k % n if type(k) is np.ndarray and k.dtype.kind in "iu" and n else k
                 for k, n in zip(keys, shape))
    return keys if type(key) is tuple else keys[0]


def _scatter(ufunc):
    def scatter(a, slices, value):
        target, slices, value = a._a, unwrap(slices, "scatter", True), unwrap(value, "scatter")
        _captured(lambda: ufunc.at(target, _wrapped(target.shape, slices), value), (value,),
                  [target])
    return scatter


cupyx = types.ModuleType("cupyx")
cupyx.scatter_add, cupyx.scatter_max, cupyx.scatter_min = (
    _scatter(np.add), _scatter(np.maximum), _scatter(np.minimum))
cupyx.empty_pinned = empty_pinned


@contextlib.contextmanager
def cuda_double():
    """Make ``cuda`` ember's test double inside the block: its backend is ember's CuPy backend
    on the fake ``cupy`` above, and ``ember.cuda`` sees one device."""
    import ember
    from ember import _backends
    from ember._backends import cupy_backend
    saved = (_backends._cuda, ember.cuda._cupy, sys.modules.get("cupy"), sys.modules.get("cupyx"))
    sys.modules["cupy"], sys.modules["cupyx"] = cupy, cupyx
    allocator, _state.local = _state.allocator, threading.local()
    try:
        _backends._cuda = cupy_backend.CupyBackend()
        ember.cuda._cupy = lambda: (cupy, 1, None)
        yield cupy
    finally:
        _backends._cuda, ember.cuda._cupy = saved[:2]
        _state.allocator, _state.local = allocator, threading.local()
        _pool.set_limit(0)
        for name, mod in zip(("cupy", "cupyx"), saved[2:]):
            if mod is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = mod


@pytest.fixture(params=["double", pytest.param("gpu", marks=pytest.mark.cuda)])
def cuda(request):
    """The cuda device: the double on every run; with ``-m cuda`` on a machine with a GPU,
    CuPy itself (the same checks, as the real-GPU tests)."""
    if request.param == "gpu":
        yield "gpu"
        return
    with cuda_double():
        yield "double"
