"""``ember.cuda``: what a PyTorch script asks of the GPU, answered through CuPy.

Every query works without CuPy or a GPU (``is_available()`` is then False and
``device_count()`` 0), so ``device = "cuda" if ember.cuda.is_available() else "cpu"`` runs
anywhere; calls that need a GPU raise torch's error when there is none.

Example:
    >>> import ember
    >>> ember.cuda.is_available() in (True, False)
    True
"""
import functools


@functools.lru_cache(maxsize=1)
def _cupy():
    """CuPy and its device count, or (None, 0) and why not."""
    try:
        import cupy
    except ImportError as e:
        return None, 0, f"CuPy is not installed ({e}): pip install 'ember[cuda]'"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:          # no driver, or a driver too old for this CuPy
        return None, 0, f"CuPy found no working CUDA driver: {e}"
    return (cupy, n, None) if n else (None, 0, "CuPy found no GPU")


def is_available():
    """Whether a CUDA GPU can run ember's cuda tensors (CuPy installed, a GPU visible)."""
    return _cupy()[1] > 0


def device_count():
    """How many CUDA GPUs are visible (0 without CuPy or a GPU)."""
    return _cupy()[1]


_state = {"initialized": False, "sync_debug_mode": 0}


def _lazy_init():
    cupy, _, why = _cupy()
    if cupy is None:
        raise RuntimeError(f"Found no NVIDIA driver on your system or no usable GPU: {why}")
    _state["initialized"] = True
    return cupy


def init():
    """Initialize ember's CUDA state (CuPy and the driver) now rather than on first use;
    raises torch's error where there is no GPU.

    Example:
        >>> import ember
        >>> if ember.cuda.is_available():
        ...     ember.cuda.init(); assert ember.cuda.is_initialized()
    """
    _lazy_init()


def is_initialized():
    """Whether ember's CUDA state has been initialized (by ``init`` or a first GPU call).

    Example:
        >>> import ember
        >>> ember.cuda.is_initialized() in (True, False)
        True
    """
    return _state["initialized"] and is_available()


def _index(device):
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    from .._device import device as as_device
    d = as_device(device)
    if d.type != "cuda":
        raise ValueError(f"Expected a cuda device, but got: {d}")
    return d.index if d.index is not None else current_device()


def current_device():
    """The index of the GPU new cuda tensors go to by default."""
    return _lazy_init().cuda.runtime.getDevice()


def set_device(device):
    """Make ``device`` (an index, ``"cuda:N"`` or an ``ember.device``) the current GPU."""
    idx = _index(device)
    if idx >= 0:
        _lazy_init().cuda.runtime.setDevice(idx)


class device:
    """Context manager that makes a GPU current inside its block."""

    def __init__(self, device):
        self.idx, self.prev = _index(device) if device is not None else -1, -1

    def __enter__(self):
        if self.idx >= 0:
            self.prev = current_device()
            set_device(self.idx)

    def __exit__(self, *exc):
        if self.prev >= 0:
            set_device(self.prev)
        return False


def get_device_properties(device=None):
    """The GPU's properties: ``name``, ``total_memory``, ``major``, ``minor``,
    ``multi_processor_count``."""
    import types
    p = _lazy_init().cuda.runtime.getDeviceProperties(_index(device))
    name = p["name"].decode() if isinstance(p["name"], bytes) else p["name"]
    return types.SimpleNamespace(name=name, total_memory=p["totalGlobalMem"], major=p["major"],
                                 minor=p["minor"], multi_processor_count=p["multiProcessorCount"])


def get_device_name(device=None):
    """The GPU's name, e.g. ``"NVIDIA H100 80GB HBM3"``."""
    return get_device_properties(device).name


def get_device_capability(device=None):
    """The GPU's compute capability as ``(major, minor)``."""
    p = get_device_properties(device)
    return p.major, p.minor


def is_tf32_supported():
    """Whether the GPU's tensor cores run TF32 matmuls (compute capability 8.0 or newer);
    False without a GPU.

    NOTE: torch answers ``is_bf16_supported(including_emulation=False)``, which is the same
    test of the hardware; ember's ``is_bf16_supported`` is False for CuPy's lack of a bfloat16
    dtype, not for the GPU's.

    Example:
        >>> import ember
        >>> ember.cuda.is_tf32_supported() in (True, False)
        True
    """
    return is_available() and get_device_capability() >= (8, 0)


def is_bf16_supported(including_emulation=True):
    """False: CuPy has no bfloat16 dtype (cupy/cupy#7527), so ember's cuda tensors cannot be
    bfloat16 (a float16 autocast is the GPU's mixed precision)."""
    return False


def synchronize(device=None):
    """Wait for every kernel queued on the GPU to finish (and raise a failed index check's
    error, as torch's device-side asserts surface here)."""
    cupy = _lazy_init()
    with cupy.cuda.Device(_index(device)):
        cupy.cuda.runtime.deviceSynchronize()
    from ._runtime import raise_device_errors
    raise_device_errors()


def __getattr__(name):
    if name == "default_generators":
        from .random import _all
        return tuple(_all())
    if name in _SUBMODULES:        # torch.cuda.graphs, nvtx... load on first use
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    if name in _GRAPH_NAMES:
        from . import graphs
        return getattr(graphs, name)
    if name.endswith("Storage"):    # torch.cuda.FloatStorage & co.
        from .._storage import legacy_storage_types
        types = legacy_storage_types(cuda=True)
        globals().update(types)
        if name in types:
            return types[name]
    # torch.cuda.FloatTensor & co., the legacy CUDA tensor types, made on first use
    from .._tensor_types import CUDA_TYPES
    if name in CUDA_TYPES:
        globals().update(CUDA_TYPES)
        return CUDA_TYPES[name]
    raise AttributeError(f"module 'ember.cuda' has no attribute '{name}'")


_SUBMODULES = ("graphs", "jiterator", "nccl", "nvtx", "profiler", "sparse")
_GRAPH_NAMES = ("CUDAGraph", "graph", "graph_pool_handle", "is_current_stream_capturing",
                "make_graphed_callables")
from . import amp  # noqa: E402,F401  (these import the helpers above)
from ._runtime import (CudaError, DeferredCudaCallError, can_device_access_peer,  # noqa: E402,F401,E501
                       check_error, clock_rate, cudart, cudaStatus, current_blas_handle,
                       current_solver_handle, device_memory_used, device_of, get_arch_list,
                       get_gencode_flags, get_sync_debug_mode, has_half, has_magma,
                       ipc_collect, list_gpu_processes, memory_usage, power_draw,
                       set_sync_debug_mode, temperature, utilization)
from .memory import (CUDAPluggableAllocator, MemPool, OutOfMemoryError,  # noqa: E402,F401,E501
                     caching_allocator_alloc, caching_allocator_delete,
                     caching_allocator_disabled, caching_allocator_enable,
                     change_current_allocator, empty_cache, get_allocator_backend,
                     get_per_process_memory_fraction, host_memory_stats, max_memory_allocated,
                     max_memory_cached, max_memory_reserved, mem_get_info, memory_allocated,
                     memory_cached, memory_reserved, memory_snapshot, memory_stats,
                     memory_summary, reset_accumulated_host_memory_stats,
                     reset_accumulated_memory_stats, reset_max_memory_allocated,
                     reset_max_memory_cached, reset_peak_host_memory_stats,
                     reset_peak_memory_stats, set_per_process_memory_fraction, use_mem_pool)
from .random import (get_rng_state, get_rng_state_all, initial_seed, manual_seed,  # noqa: E402,F401,E501
                     manual_seed_all, seed, seed_all, set_rng_state, set_rng_state_all)
from .streams import (Event, ExternalStream, Stream, StreamContext, current_stream,  # noqa: E402,F401,E501
                      default_stream, get_stream_from_external, set_stream, stream)
