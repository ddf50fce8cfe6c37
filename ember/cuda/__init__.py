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


def _lazy_init():
    cupy, _, why = _cupy()
    if cupy is None:
        raise RuntimeError(f"Found no NVIDIA driver on your system or no usable GPU: {why}")
    return cupy


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
    return types.SimpleNamespace(name=name, total_memory=p["totalGlobalMem"],
                                 major=p["major"], minor=p["minor"],
                                 multi_processor_count=p["multiProcessorCount"])


def get_device_name(device=None):
    """The GPU's name, e.g. ``"NVIDIA H100 80GB HBM3"``."""
    return get_device_properties(device).name


def get_device_capability(device=None):
    """The GPU's compute capability as ``(major, minor)``."""
    p = get_device_properties(device)
    return p.major, p.minor


def is_bf16_supported(including_emulation=True):
    """False: CuPy has no bfloat16 dtype (cupy/cupy#7527), so ember's cuda tensors cannot be
    bfloat16 (a float16 autocast is the GPU's mixed precision)."""
    return False


def synchronize(device=None):
    """Wait for every kernel queued on the GPU to finish."""
    cupy = _lazy_init()
    with cupy.cuda.Device(_index(device)):
        cupy.cuda.runtime.deviceSynchronize()


def __getattr__(name):
    if name == "default_generators":
        from .random import _all
        return tuple(_all())
    # torch.cuda.FloatTensor & co., the legacy CUDA tensor types, made on first use
    from .._tensor_types import CUDA_TYPES
    if name in CUDA_TYPES:
        globals().update(CUDA_TYPES)
        return CUDA_TYPES[name]
    raise AttributeError(f"module 'ember.cuda' has no attribute '{name}'")


from . import amp  # noqa: E402,F401  (these import the helpers above)
from .memory import (OutOfMemoryError, empty_cache, get_per_process_memory_fraction,  # noqa: E402,F401,E501
                     max_memory_allocated, max_memory_reserved, mem_get_info, memory_allocated,
                     memory_reserved, memory_stats, memory_summary,
                     reset_accumulated_memory_stats, reset_max_memory_allocated,
                     reset_peak_memory_stats, set_per_process_memory_fraction)
from .random import (get_rng_state, get_rng_state_all, initial_seed, manual_seed,  # noqa: E402,F401,E501
                     manual_seed_all, seed, seed_all, set_rng_state, set_rng_state_all)
from .streams import (Event, Stream, StreamContext, current_stream, default_stream,  # noqa: E402,F401,E501
                      set_stream, stream)
