"""The cuda device: CuPy arrays. Imported on first use of a cuda tensor only."""
import numpy as np


def _import_cupy():
    try:
        import cupy
    except ImportError as e:
        raise RuntimeError("ember's cuda device needs CuPy: pip install 'ember[cuda]' "
                           f"(import failed: {e})") from None
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:      # CUDA driver missing or no GPU
        raise RuntimeError(f"Found no NVIDIA driver or GPU for the cuda device: {e}") from None
    if n == 0:
        raise RuntimeError("Found no NVIDIA GPU for the cuda device")
    return cupy


class CupyBackend:
    """Runs the same op forwards as the cpu backend with ``xp = cupy``."""

    name = "cuda"

    def __init__(self):
        self.xp = _import_cupy()
        from ..cuda.memory import install_allocator
        install_allocator(self.xp)      # (peak memory statistics, torch's OOM error)

    @staticmethod
    def _check_dtype(dt):
        # ml_dtypes' NumPy types (bfloat16, float8): CuPy has none of them (cupy/cupy#7527)
        if dt.type.__module__.startswith("ml_dtypes"):
            raise TypeError(f"ember's cuda device has no {dt} tensors: CuPy has no {dt} dtype "
                            "(use float16 or float32 on the GPU)")

    def asarray(self, obj, np_dtype=None, device=None):
        if np_dtype is not None:
            self._check_dtype(np.dtype(np_dtype))
        with self.xp.cuda.Device(device.index or 0):
            return self.xp.asarray(obj, dtype=np_dtype)

    def to_host(self, arr):
        from ..cuda._runtime import synchronizing
        synchronizing()         # (set_sync_debug_mode's warning or error)
        return self.xp.asnumpy(arr)

    def from_host(self, arr, device, non_blocking=False):
        """``arr`` copied to ``device``. From pinned memory with ``non_blocking`` the copy is
        queued on the current stream and the host goes on at once; otherwise the host waits
        for it (CuPy 14's ``asarray`` would not wait for a pinned source)."""
        self._check_dtype(arr.dtype)
        with self.xp.cuda.Device(device.index or 0):
            if not self.is_pinned(arr):
                return self.xp.asarray(arr)
            out = self.xp.empty(arr.shape, arr.dtype)
            if arr.flags.c_contiguous:
                out.set(arr, stream=self.xp.cuda.get_current_stream())
            else:
                out[...] = self.xp.asarray(arr)
            if not non_blocking:
                self.xp.cuda.get_current_stream().synchronize()
            return out

    def pin(self, arr):
        """A copy of host array ``arr`` in page-locked memory, which copies to the GPU read
        asynchronously (``non_blocking``)."""
        import cupyx
        from ..cuda.memory import pinned
        out = cupyx.empty_pinned(arr.shape, arr.dtype)
        out[...] = arr
        pinned(out)             # (host_memory_stats)
        return out

    def is_pinned(self, arr):
        """Whether host array ``arr`` views page-locked memory (``pin``'s)."""
        from .._storage import _root
        return isinstance(_root(arr).base, self.xp.cuda.PinnedMemoryPointer)

    def run(self, opdef, arrays, kwargs):
        # (NumPy 2's arrays and scalars have a .device too: "cpu")
        dev = next((a.device for a in arrays if isinstance(a, self.xp.ndarray)), None)
        if dev is None:
            return opdef.fwd(self.xp, *arrays, **kwargs)
        with dev:
            return opdef.fwd(self.xp, *arrays, **kwargs)
