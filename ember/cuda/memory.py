"""GPU memory (``torch.cuda.memory_allocated`` & co.): CuPy's default memory pool behind
torch's names.

The pool gives the current sizes (``used_bytes``: held by arrays; ``total_bytes``: held from
the driver). Peaks, cumulative counts and out-of-memory counts are kept by ember: the cuda
backend allocates through ``_Allocator``, which reads the pool after every allocation, the
moment its use is highest.
"""
import collections
import contextlib
import ctypes
import itertools
import warnings
import weakref

from . import _index, _lazy_init, device_count, is_available

# (these ask the package's _cupy at each call, which the test double replaces)


class OutOfMemoryError(RuntimeError):
    """Raised when the GPU (or the memory fraction set for the process) has no room left.

    Example:
        >>> import ember
        >>> issubclass(ember.cuda.OutOfMemoryError, RuntimeError)
        True
    """


_STAT_KEYS = ("allocated_bytes", "reserved_bytes")
_stats = collections.defaultdict(lambda: {"allocated_bytes.all.peak": 0,
                                          "reserved_bytes.all.peak": 0,
                                          "allocated_bytes.all.allocated": 0,
                                          "allocation.all.allocated": 0, "num_ooms": 0})


class _Allocator:
    """CuPy's allocator ``prev`` (a pool's ``malloc``), keeping each device's peaks, and
    raising torch's error where the pool runs out.

    NOTE: the error raised is both ember's ``OutOfMemoryError`` (a RuntimeError, as torch's)
    and CuPy's (a MemoryError), so that CuPy's own recovery from it (and code written for
    CuPy) still catches it."""

    def __init__(self, cupy, prev):
        self.cupy, self.prev = cupy, prev
        self.error = type("OutOfMemoryError", (OutOfMemoryError,
                                               cupy.cuda.memory.OutOfMemoryError),
                          {"__init__": RuntimeError.__init__, "__module__": __name__})

    def __call__(self, size):
        s = _stats[self.cupy.cuda.runtime.getDevice()]
        before = _usage(self.cupy)[0]
        try:
            mem = self.prev(size)
        except self.cupy.cuda.memory.OutOfMemoryError as e:
            mem = next((m for m in _on_oom(size)), None)    # MemPool(use_on_oom=True)
            if mem is None:
                s["num_ooms"] += 1
                raise self.error(out_of_memory(self.cupy, e, size)) from None
        used, total = _usage(self.cupy)
        s["allocated_bytes.all.peak"] = max(s["allocated_bytes.all.peak"], used)
        s["reserved_bytes.all.peak"] = max(s["reserved_bytes.all.peak"], total)
        s["allocated_bytes.all.allocated"] += used - before
        s["allocation.all.allocated"] += 1
        return mem


def install_allocator(cupy):
    """Route CuPy's allocations through ``_Allocator`` (once)."""
    from . import _state
    _state["initialized"] = True        # (the cuda backend exists: CUDA is initialized)
    prev = cupy.cuda.get_allocator()
    if not isinstance(prev, _Allocator):
        cupy.cuda.set_allocator(_Allocator(cupy, prev))


_mempools = weakref.WeakValueDictionary()      # MemPool.id -> the live MemPool
_direct = collections.Counter()                # device -> bytes held by uncached allocators


def _usage(cupy):
    """(allocated, reserved) bytes on the current device: the default pool's, every live
    ``MemPool``'s, and what uncached allocators hold."""
    pools = [cupy.get_default_memory_pool()] + [p._pool for p in list(_mempools.values())]
    extra = _direct[cupy.cuda.runtime.getDevice()]
    return (sum(p.used_bytes() for p in pools) + extra, sum(p.total_bytes() for p in pools) + extra)


def _on_oom(size):
    for p in list(_mempools.values()):
        if p._use_on_oom:
            try:
                yield p._pool.malloc(size)
            except MemoryError:
                pass


class _Uncached:
    """A CuPy allocator that asks ``alloc(size, device, stream) -> ptr`` for every block and
    gives it back with ``free(ptr, size, device, stream)`` as soon as it dies (torch's
    pluggable allocator interface; ``cudaMalloc``/``cudaFree`` by default)."""

    def __init__(self, cupy, alloc=None, free=None, counted=True):
        rt, self.cupy, self.sizes, self.counted = cupy.cuda.runtime, cupy, {}, counted
        self.alloc = alloc or (lambda n, d, s: rt.malloc(n))
        self.free = free or (lambda p, n, d, s: rt.free(p))
        self.malloc = cupy.cuda.PythonFunctionAllocator(self._malloc, self._free).malloc

    def _malloc(self, size, dev):
        stream = self.cupy.cuda.get_current_stream().ptr
        try:
            ptr = self.alloc(size, dev, stream)
        except self.cupy.cuda.runtime.CUDARuntimeError as e:
            if e.status != 2:           # (cudaErrorMemoryAllocation: CuPy's error, below)
                raise
            ptr = 0
        if not ptr:
            raise self.cupy.cuda.memory.OutOfMemoryError(size, _direct[dev])
        self.sizes[ptr] = size, stream
        _direct[dev] += size * self.counted       # (a pool's growth counts in the pool)
        return ptr

    def _free(self, ptr, dev):
        size, stream = self.sizes.pop(ptr)
        _direct[dev] -= size * self.counted
        self.free(ptr, size, dev, stream)


def _format_size(n):
    # c10's format_size, which torch's out-of-memory message uses
    if n <= 1024:
        return f"{n} bytes"
    for unit, shift in (("KiB", 10), ("MiB", 20)):
        if n < 1 << (shift + 10):
            return f"{n / (1 << shift):.2f} {unit}"
    return f"{n / (1 << 30):.2f} GiB"


def out_of_memory(cupy, err, size):
    """torch's out-of-memory message for CuPy's ``err``, raised allocating ``size`` bytes."""
    idx = cupy.cuda.runtime.getDevice()
    free, total = cupy.cuda.runtime.memGetInfo()
    used, held = _usage(cupy)
    limit = cupy.get_default_memory_pool().get_limit()
    cap = f" of which {_format_size(free)} is free" + \
        (f" (the process is limited to {_format_size(limit)})" if limit else "")
    return (
        f"CUDA out of memory. Tried to allocate {_format_size(size)}. GPU {idx} has a total "
        f"capacity of {_format_size(total)}{cap}. Of the allocated memory "
        f"{_format_size(used)} is allocated by ember, and {_format_size(held - used)} is "
        "reserved by ember but unallocated. If reserved but unallocated memory is large, "
        "ember.cuda.empty_cache() returns it to the driver.")


def _pool(device):
    cupy = _lazy_init()
    return cupy, cupy.cuda.Device(_index(device))


def _on(device, fn):
    """``fn(cupy)`` with ``device`` current; 0 without a GPU (as torch's queries give)."""
    if not is_available():
        return 0
    cupy, dev = _pool(device)
    with dev:
        return fn(cupy)


def memory_allocated(device=None):
    """Bytes held by live cuda tensors on ``device`` (CuPy's pool in use, in 512-byte units).

    Example:
        >>> import ember
        >>> ember.cuda.memory_allocated() >= 0
        True
    """
    return _on(device, lambda cupy: _usage(cupy)[0])


def memory_reserved(device=None):
    """Bytes the memory pool holds from the driver on ``device``: in use plus cached."""
    return _on(device, lambda cupy: _usage(cupy)[1])


def max_memory_allocated(device=None):
    """The highest ``memory_allocated`` since start or ``reset_peak_memory_stats``."""
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def max_memory_reserved(device=None):
    """The highest ``memory_reserved`` since start or ``reset_peak_memory_stats``."""
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device=None):
    """Start the peaks over from the current sizes."""
    if is_available():
        s = _stats[_index(device)]
        s["allocated_bytes.all.peak"] = memory_allocated(device)
        s["reserved_bytes.all.peak"] = memory_reserved(device)


def reset_accumulated_memory_stats(device=None):
    """Zero the cumulative counts (bytes and allocations made, out-of-memory errors)."""
    if is_available():
        s = _stats[_index(device)]
        s.update({"allocated_bytes.all.allocated": 0, "allocation.all.allocated": 0, "num_ooms": 0})


def reset_max_memory_allocated(device=None):
    """Deprecated spelling of ``reset_peak_memory_stats``."""
    reset_peak_memory_stats(device)


def empty_cache():
    """Give the pool's unused blocks (on every GPU) back to the driver.

    Example:
        >>> import ember
        >>> ember.cuda.empty_cache()
    """
    if not is_available():
        return
    cupy, n = _lazy_init(), device_count()
    from .streams import _pending
    _pending[:] = [p for p in _pending if not p[0].query()]
    for i in range(n):
        with cupy.cuda.Device(i):
            cupy.get_default_memory_pool().free_all_blocks()


def memory_stats(device=None):
    """torch's memory statistics that CuPy's pool can answer, as an ordered dict: current
    and peak ``allocated_bytes.all.*`` / ``reserved_bytes.all.*``, the cumulative
    ``allocated_bytes.all.allocated`` / ``.freed`` and ``allocation.all.allocated``,
    ``num_ooms`` (an empty dict without a GPU, as torch's).

    Example:
        >>> import ember
        >>> isinstance(ember.cuda.memory_stats(), dict)
        True
    """
    if not is_available():
        return collections.OrderedDict()
    s = _stats[_index(device)]
    cur = {"allocated_bytes.all.current": memory_allocated(device),
           "reserved_bytes.all.current": memory_reserved(device)}
    out = dict(s, **cur)
    for k in _STAT_KEYS:          # (an allocation not made through ember's allocator)
        out[f"{k}.all.peak"] = max(out[f"{k}.all.peak"], out[f"{k}.all.current"])
    out["allocated_bytes.all.freed"] = out["allocated_bytes.all.allocated"] - \
        out["allocated_bytes.all.current"]
    out["inactive_split_bytes.all.current"] = out["reserved_bytes.all.current"] - \
        out["allocated_bytes.all.current"]
    return collections.OrderedDict(sorted(out.items()))


def memory_summary(device=None, abbreviated=False):
    """A table of ``memory_stats`` for printing.

    Example:
        >>> import ember
        >>> "memory" in ember.cuda.memory_summary().lower()
        True
    """
    st = memory_stats(device)
    idx = _index(device) if is_available() else 0

    def row(*cells):
        return f"| {cells[0]:<26}" + "".join(f"| {c:>11} " for c in cells[1:]) + "|"

    def size(key):
        return _format_size(st[key]) if key in st else ""
    a, r = "allocated_bytes.all.", "reserved_bytes.all."
    lines = [row("Metric", "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed"),
             row("Allocated memory", size(a + "current"), size(a + "peak"),
                 size(a + "allocated"), size(a + "freed")),
             row("GPU reserved memory", size(r + "current"), size(r + "peak"), "", ""),
             row("Allocations made", str(st.get("allocation.all.allocated", 0)), "", "", ""),
             row("Out-of-memory errors", str(st.get("num_ooms", 0)), "", "", "")]
    bar = "|" + "=" * (len(lines[0]) - 2) + "|"
    title = f"|{'ember CUDA memory summary, device ID ' + str(idx):^{len(bar) - 2}}|"
    return "\n".join([bar, title, bar, lines[0], bar, *lines[1:], bar]) + "\n"


def mem_get_info(device=None):
    """``(free, total)`` bytes of the GPU, as the driver counts them (other processes too)."""
    cupy, dev = _pool(device)
    with dev:
        return tuple(cupy.cuda.runtime.memGetInfo())


def set_per_process_memory_fraction(fraction, device=None):
    """Cap ember's pool on ``device`` at ``fraction`` of the GPU's memory; allocating past it
    raises ``OutOfMemoryError``.

    NOTE: the cap is the default pool's (CuPy caps each pool on its own): memory in a
    ``MemPool`` is not counted against it, and a ``MemPool(use_on_oom=True)`` serves what the
    default pool refuses."""
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    cupy, dev = _pool(device)
    with dev:
        cupy.get_default_memory_pool().set_limit(fraction=fraction)


def get_per_process_memory_fraction(device=None):
    """The fraction set by ``set_per_process_memory_fraction`` (1.0 if none)."""
    cupy, dev = _pool(device)
    with dev:
        limit = cupy.get_default_memory_pool().get_limit()
        return limit / cupy.cuda.runtime.memGetInfo()[1] if limit else 1.0


def memory_cached(device=None):
    """Deprecated name of ``memory_reserved`` (warns, as torch's)."""
    warnings.warn("`torch.cuda.memory_cached` has been renamed to `torch.cuda.memory_reserved`",
                  FutureWarning, stacklevel=2)
    return memory_reserved(device)


def max_memory_cached(device=None):
    """Deprecated name of ``max_memory_reserved`` (warns, as torch's)."""
    warnings.warn("`torch.cuda.max_memory_cached` has been renamed to "
                  "`torch.cuda.max_memory_reserved`", FutureWarning, stacklevel=2)
    return max_memory_reserved(device)


def reset_max_memory_cached(device=None):
    """Deprecated spelling of ``reset_peak_memory_stats`` (warns, as torch's)."""
    warnings.warn("torch.cuda.reset_max_memory_cached now calls "
                  "torch.cuda.reset_peak_memory_stats, which resets /all/ peak memory stats.",
                  FutureWarning, stacklevel=2)
    reset_peak_memory_stats(device)


# ---- allocators and pools -------------------------------------------------------------------
class _CUDAAllocator:
    """An allocator ``change_current_allocator`` and ``MemPool`` take."""

    def allocator(self):
        return self


class CUDAPluggableAllocator(_CUDAAllocator):
    """An allocator in a shared library: ``alloc_fn_name`` is
    ``void* alloc(ssize_t size, int device, cudaStream_t stream)`` and ``free_fn_name``
    ``void free(void* ptr, ssize_t size, int device, cudaStream_t stream)``, as torch's.
    ember calls them (through ctypes) for every block, behind CuPy's allocator interface.

    Example:
        >>> import ember
        >>> ember.cuda.CUDAPluggableAllocator("./no_such_alloc.so", "my_malloc", "my_free")
        Traceback (most recent call last):
        OSError: ./no_such_alloc.so: cannot open shared object file: No such file or directory
    """

    def __init__(self, path_to_so_file, alloc_fn_name, free_fn_name):
        lib = ctypes.CDLL(path_to_so_file)
        self._alloc, self._free = getattr(lib, alloc_fn_name), getattr(lib, free_fn_name)
        self._alloc.restype, self._free.restype = ctypes.c_void_p, None
        self._alloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        self._free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]

    def _malloc(self, cupy, counted=True):
        return _Uncached(cupy, lambda n, d, s: self._alloc(n, d, s),
                         lambda p, n, d, s: self._free(p, n, d, s), counted).malloc


_backend = {"allocator": None}


def change_current_allocator(allocator):
    """Make ``allocator`` (a ``CUDAPluggableAllocator``) allocate every new cuda tensor.

    NOTE: torch refuses once its allocator has allocated; CuPy frees each block through the
    allocator that made it, so ember swaps at any time."""
    if not isinstance(allocator, _CUDAAllocator):
        raise TypeError(f"change_current_allocator(): expected a CUDAPluggableAllocator, got "
                        f"{type(allocator).__name__}")
    cupy = _lazy_init()
    cupy.cuda.set_allocator(_Allocator(cupy, allocator._malloc(cupy)))
    _backend["allocator"] = allocator


def get_allocator_backend():
    """The allocator behind cuda tensors: ``"native"`` (a caching pool: CuPy's, in ember's
    case) or ``"pluggable"`` after ``change_current_allocator``.

    Example:
        >>> import ember
        >>> if ember.cuda.is_available():
        ...     assert ember.cuda.get_allocator_backend() == "native"
    """
    _lazy_init()
    return "native" if _backend["allocator"] is None else "pluggable"


_ids = itertools.count(1)


class MemPool(_CUDAAllocator):
    """A private memory pool: cuda tensors made inside ``use_mem_pool(pool)`` take their
    memory from it (a CuPy ``MemoryPool`` over ``allocator``, CuPy's ``cudaMalloc`` by
    default), and it keeps their blocks for reuse by later allocations in it. Its memory
    counts in ``memory_allocated``/``memory_reserved``; it is freed when the pool dies.

    Args:
        allocator: a ``CUDAPluggableAllocator`` to grow the pool with.
        use_on_oom (bool): an allocation outside the pool that runs out of memory is served
            from this pool.
        no_split (bool): not supported: CuPy's pool always splits its blocks.

    Example:
        >>> import ember
        >>> if ember.cuda.is_available():
        ...     pool = ember.cuda.MemPool()
        ...     with ember.cuda.use_mem_pool(pool):
        ...         x = ember.ones(1024, device="cuda")
        ...     assert pool.snapshot()[0]["allocated_size"] >= 4096
    """

    def __init__(self, allocator=None, use_on_oom=False, no_split=False):
        cupy = _lazy_init()
        if no_split:
            raise NotImplementedError("MemPool(no_split=True): CuPy's memory pool always "
                                      "splits its blocks")
        self._allocator, self._use_on_oom, self._users = allocator, use_on_oom, 0
        self._pool = cupy.cuda.MemoryPool(None if allocator is None else
                                          allocator._malloc(cupy, counted=False))
        self._id = (0, next(_ids))
        _mempools[self._id] = self

    @property
    def id(self):
        """This pool's id, a tuple of two ints (``memory_snapshot(mempool_id=...)``)."""
        return self._id

    allocator = property(lambda self: self._allocator)

    def use_count(self):
        """How many hold the pool: the pool itself, each ``use_mem_pool`` block using it and
        each CUDA graph captured into it."""
        return 1 + self._users

    def snapshot(self, include_traces=True):
        """``memory_snapshot`` of this pool."""
        return memory_snapshot(self.id, include_traces)

    def __del__(self):
        try:
            self._pool.free_all_blocks()
        except Exception:       # (interpreter shutdown)
            pass


@contextlib.contextmanager
def use_mem_pool(pool, device=None):
    """Inside the block, cuda tensors on this thread take their memory from ``pool``.

    NOTE: CuPy's allocator is per thread, not per device: the pool serves every GPU."""
    cupy = _lazy_init()
    if not isinstance(pool, MemPool):
        raise TypeError(f"use_mem_pool(): expected a MemPool, got {type(pool).__name__}")
    _index(device)
    pool._users += 1
    try:
        with cupy.cuda.using_allocator(_Allocator(cupy, pool._pool.malloc)):
            yield
    finally:
        pool._users -= 1


def memory_snapshot(mempool_id=None, include_traces=True):
    """The memory pools' state, one entry per pool and GPU in torch's segment format
    (``device``, ``total_size`` reserved, ``allocated_size``/``active_size`` in use,
    ``segment_pool_id``...); ``[]`` without a GPU.

    NOTE: CuPy's pools do not list their blocks, so each entry describes a whole pool and
    ``blocks``/``frames`` are empty.

    Example:
        >>> import ember
        >>> isinstance(ember.cuda.memory_snapshot() if ember.cuda.is_available() else [], list)
        True
    """
    if not is_available():
        return []
    cupy, out = _lazy_init(), []
    pools = [((0, 0), cupy.get_default_memory_pool())] + \
        [(k, p._pool) for k, p in list(_mempools.items())]
    for pid, pool in pools:
        if mempool_id is not None and tuple(mempool_id) != pid:
            continue
        for dev in range(device_count()):
            with cupy.cuda.Device(dev):
                total, used = pool.total_bytes(), pool.used_bytes()
            if total or mempool_id is not None:
                out.append({"device": dev, "total_size": total, "allocated_size": used,
                            "active_size": used, "requested_size": used, "stream": 0,
                            "segment_type": "large", "segment_pool_id": pid,
                            "is_expandable": False, "frames": [], "blocks": []})
    return out


_raw = {}       # caching_allocator_alloc's blocks: pointer -> CuPy MemoryPointer


def caching_allocator_alloc(size, device=None, stream=None):
    """``size`` bytes from ember's allocator on ``device`` for ``stream`` (the current
    ones by default), as a pointer (an int) for ``caching_allocator_delete``.

    Example:
        >>> import ember
        >>> if ember.cuda.is_available():
        ...     p = ember.cuda.caching_allocator_alloc(1024)
        ...     ember.cuda.caching_allocator_delete(p)
    """
    cupy = _lazy_init()
    from .streams import Stream, _cupy_stream
    if stream is not None and not isinstance(stream, (Stream, int)):
        raise TypeError("Invalid type for stream argument, must be `torch.cuda.Stream` or "
                        "`int` representing a pointer to a existing stream")
    with cupy.cuda.Device(_index(device)):
        s = stream._s if isinstance(stream, Stream) else cupy.cuda.get_current_stream() \
            if stream is None else _cupy_stream(cupy, stream)
        with s:        # (CuPy's pool keeps a block for the stream it was allocated on)
            mem = cupy.cuda.alloc(size)
    _raw[mem.ptr] = mem
    return mem.ptr


def caching_allocator_delete(mem_ptr):
    """Give back a block from ``caching_allocator_alloc``."""
    _lazy_init()
    if _raw.pop(mem_ptr, None) is None:
        raise RuntimeError(f"invalid device pointer: {mem_ptr:#x}")


_caching = {"enabled": True, "default": None}


def caching_allocator_enable(value=True):
    """Turn the caching pool on or off: while off, every cuda tensor's memory comes from
    ``cudaMalloc`` and goes back with ``cudaFree`` as it dies (nothing without a GPU, as
    torch's does before initialization)."""
    if not is_available() or bool(value) == _caching["enabled"]:
        return
    cupy = _lazy_init()
    if not value:
        _caching["default"] = cupy.cuda.get_allocator()
        cupy.cuda.set_allocator(_Allocator(cupy, _Uncached(cupy).malloc))
    else:
        cupy.cuda.set_allocator(_caching["default"])
    _caching["enabled"] = bool(value)


@contextlib.contextmanager
def caching_allocator_disabled():
    """A block inside which the caching pool is off (``caching_allocator_enable(False)``)."""
    prev = _caching["enabled"]
    caching_allocator_enable(False)
    try:
        yield
    finally:
        caching_allocator_enable(prev)


# ---- pinned host memory ---------------------------------------------------------------------
_host = collections.Counter()


def pinned(arr):
    """Count a page-locked host array (``Tensor.pin_memory``'s) until it dies."""
    n = arr.nbytes
    for k, v in (("active_requests", 1), ("active_bytes", n)):
        _host[k + ".current"] += v
        _host[k + ".allocated"] += v
        _host[k + ".peak"] = max(_host[k + ".peak"], _host[k + ".current"])
    weakref.finalize(arr, _unpinned, n)


def _unpinned(n):
    for k, v in (("active_requests", 1), ("active_bytes", n)):
        _host[k + ".current"] -= v
        _host[k + ".freed"] += v


def host_memory_stats():
    """Page-locked host memory in use by pinned tensors: ``active_requests.*`` (blocks) and
    ``active_bytes.*`` (their bytes), each ``current``, ``peak``, ``allocated`` and ``freed``;
    empty before CUDA is initialized, as torch's.

    NOTE: CuPy's pinned pool does not report its own blocks, so torch's ``allocations.*``,
    ``allocated_bytes.*`` and timing counters are absent.

    Example:
        >>> import ember
        >>> isinstance(ember.cuda.host_memory_stats(), dict)
        True
    """
    from . import is_initialized
    if not is_initialized():
        return collections.OrderedDict()
    keys = [f"{k}.{m}" for k in ("active_bytes", "active_requests")
            for m in ("allocated", "current", "freed", "peak")]
    return collections.OrderedDict((k, _host[k]) for k in keys)


def reset_peak_host_memory_stats():
    """Start the host peaks over from the current values."""
    for k in ("active_requests", "active_bytes"):
        _host[k + ".peak"] = _host[k + ".current"]


def reset_accumulated_host_memory_stats():
    """Zero the host counts of blocks and bytes pinned and freed."""
    for k in ("active_requests", "active_bytes"):
        _host[k + ".allocated"] = _host[k + ".freed"] = 0
