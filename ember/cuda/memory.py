"""GPU memory (``torch.cuda.memory_allocated`` & co.): CuPy's default memory pool behind
torch's names.

The pool gives the current sizes (``used_bytes``: held by arrays; ``total_bytes``: held from
the driver). Peaks, cumulative counts and out-of-memory counts are kept by ember: the cuda
backend allocates through ``_Allocator``, which reads the pool after every allocation, the
moment its use is highest.
"""
import collections

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
    """CuPy's allocator ``prev`` (the pool's ``malloc``), keeping each device's peaks, and
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
        pool, s = self.cupy.get_default_memory_pool(), _stats[self.cupy.cuda.runtime.getDevice()]
        before = pool.used_bytes()
        try:
            mem = self.prev(size)
        except self.cupy.cuda.memory.OutOfMemoryError as e:
            s["num_ooms"] += 1
            raise self.error(out_of_memory(self.cupy, e, size)) from None
        used = pool.used_bytes()
        s["allocated_bytes.all.peak"] = max(s["allocated_bytes.all.peak"], used)
        s["reserved_bytes.all.peak"] = max(s["reserved_bytes.all.peak"], pool.total_bytes())
        s["allocated_bytes.all.allocated"] += used - before
        s["allocation.all.allocated"] += 1
        return mem


def install_allocator(cupy):
    """Route CuPy's allocations through ``_Allocator`` (once)."""
    prev = cupy.cuda.get_allocator()
    if not isinstance(prev, _Allocator):
        cupy.cuda.set_allocator(_Allocator(cupy, prev))


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
    pool = cupy.get_default_memory_pool()
    used, held = pool.used_bytes(), pool.total_bytes()
    limit = pool.get_limit()
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
    """``fn(pool)`` with ``device`` current; 0 without a GPU (as torch's queries give)."""
    if not is_available():
        return 0
    cupy, dev = _pool(device)
    with dev:
        return fn(cupy.get_default_memory_pool())


def memory_allocated(device=None):
    """Bytes held by live cuda tensors on ``device`` (CuPy's pool in use, in 512-byte units).

    Example:
        >>> import ember
        >>> ember.cuda.memory_allocated() >= 0
        True
    """
    return _on(device, lambda p: p.used_bytes())


def memory_reserved(device=None):
    """Bytes the memory pool holds from the driver on ``device``: in use plus cached."""
    return _on(device, lambda p: p.total_bytes())


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
        s.update({"allocated_bytes.all.allocated": 0, "allocation.all.allocated": 0,
                  "num_ooms": 0})


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
    raises ``OutOfMemoryError``."""
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
