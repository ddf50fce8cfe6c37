"""The rest of ``torch.cuda``'s runtime queries, answered by CuPy's runtime and NVML.

Queries of the GPU's sensors (``utilization``, ``temperature``...) go through NVML's Python
bindings (``pynvml``, from the ``nvidia-ml-py`` package, CuPy's optional dependency); without
them they raise torch's ``ModuleNotFoundError``, as torch's do.
"""
import enum
import os
import warnings

import numpy as np

from . import _index, _lazy_init, _state, device, device_count

has_half = True     # CuPy has float16 on every GPU it supports
has_magma = False   # CuPy's linear algebra is cuSOLVER's; there is no MAGMA


class cudaStatus:
    """The two CUDA status codes torch names."""
    SUCCESS: int = 0
    ERROR_NOT_READY: int = 34


class CudaError(RuntimeError):
    """A CUDA runtime error code, with the driver's description of it.

    Example:
        >>> import ember
        >>> ember.cuda.CudaError(1).code, issubclass(ember.cuda.CudaError, RuntimeError)
        (1, True)
    """

    def __init__(self, code):
        self.code = code
        try:        # the runtime's description of the code: "cudaErrorX: text"
            import cupy
            msg = str(cupy.cuda.runtime.CUDARuntimeError(code)).split(": ", 1)[-1]
        except Exception:           # (no CuPy, or no runtime library to ask)
            msg = "CUDA error"
        super().__init__(f"{msg} ({code})")


class DeferredCudaCallError(Exception):
    """Raised when a CUDA call queued until initialization fails at initialization."""


def check_error(res):
    """Raise ``CudaError`` for a CUDA status code other than success (0).

    Example:
        >>> import ember
        >>> ember.cuda.check_error(0)
    """
    if res != cudaStatus.SUCCESS:
        raise CudaError(res)


class _CudaRT:
    """torch's ``cudart()`` module: a few CUDA runtime calls that return a status code."""

    class cudaError(enum.IntEnum):
        success = 0
        invalid_value = 1
        memory_allocation = 2

    def __init__(self, cupy):
        self._rt = cupy.cuda.runtime

    def _status(self, fn, *args):
        try:
            fn(*args)
        except self._rt.CUDARuntimeError as e:
            return e.status
        return 0

    def cudaGetErrorString(self, code):
        return str(CudaError(int(code))).rsplit(" (", 1)[0]

    def cudaProfilerStart(self):
        return self._status(self._rt.profilerStart)

    def cudaProfilerStop(self):
        return self._status(self._rt.profilerStop)

    def cudaHostRegister(self, ptr, size, flags):
        return self._status(self._rt.hostRegister, ptr, size, flags)

    def cudaHostUnregister(self, ptr):
        return self._status(self._rt.hostUnregister, ptr)

    def cudaMemGetInfo(self, device_index):
        with device(device_index):
            return tuple(self._rt.memGetInfo())


def cudart():
    """The CUDA runtime calls torch exposes (``cudaProfilerStart``/``Stop``,
    ``cudaHostRegister``/``Unregister``, ``cudaMemGetInfo``, ``cudaGetErrorString``), each
    returning the status code ``check_error`` takes; CuPy's runtime makes them.

    Example:
        >>> import ember
        >>> if ember.cuda.is_available():
        ...     ember.cuda.check_error(ember.cuda.cudart().cudaProfilerStart())
    """
    return _CudaRT(_lazy_init())


class device_of(device):
    """Make the GPU of ``obj`` (a tensor or storage) current inside the block; a no-op for
    one that is not on a GPU.

    Example:
        >>> import ember
        >>> with ember.cuda.device_of(ember.ones(2)):   # a cpu tensor: nothing changes
        ...     pass
    """

    def __init__(self, obj):
        super().__init__(obj.device.index or 0 if obj.is_cuda else -1)


def can_device_access_peer(device, peer_device):
    """Whether GPU ``device`` can read and write ``peer_device``'s memory directly.

    Example:
        >>> import ember
        >>> if ember.cuda.device_count() > 1:
        ...     ember.cuda.can_device_access_peer(0, 1) in (True, False)
    """
    cupy = _lazy_init()
    d, p = _index(device), _index(peer_device)
    if not 0 <= d < device_count():
        raise AssertionError("Invalid device id")
    if not 0 <= p < device_count():
        raise AssertionError("Invalid peer device id")
    return bool(cupy.cuda.runtime.deviceCanAccessPeer(d, p))


def get_arch_list():
    """The GPU architectures ember's kernels can be built for (``["sm_50", ...]``): CuPy
    compiles them at run time with NVRTC, so these are the ones NVRTC supports; ``[]``
    without a GPU.

    Example:
        >>> import ember
        >>> isinstance(ember.cuda.get_arch_list(), list)
        True
    """
    from . import _cupy     # (the package's, which the test double replaces)
    cupy = _cupy()[0]
    return [] if cupy is None else [f"sm_{a}" for a in cupy.cuda.nvrtc.getSupportedArchs()]


def get_gencode_flags():
    """``get_arch_list()`` as nvcc's ``-gencode`` flags ("" without a GPU).

    Example:
        >>> import ember
        >>> isinstance(ember.cuda.get_gencode_flags(), str)
        True
    """
    return " ".join(f"-gencode compute=compute_{a},code={k}_{a}"
                    for k, a in (x.split("_") for x in get_arch_list()))


def current_blas_handle():
    """The cuBLAS handle (an int) CuPy's matmuls use on the current GPU.

    Example:
        >>> import ember
        >>> if ember.cuda.is_available():
        ...     assert ember.cuda.current_blas_handle() != 0
    """
    return _lazy_init().cuda.device.get_cublas_handle()


def current_solver_handle():
    """The cuSOLVER handle (an int) CuPy's linear algebra uses on the current GPU."""
    return _lazy_init().cuda.device.get_cusolver_handle()


_SYNC_MODES = {"default": 0, "warn": 1, "error": 2}


def set_sync_debug_mode(debug_mode):
    """Warn (``"warn"`` or 1) or raise (``"error"`` or 2) when an op waits for the GPU: a
    copy of a cuda tensor to the host (``.item()``, ``.cpu()``, ``.tolist()``, printing);
    ``"default"`` or 0 stops.

    Example:
        >>> import ember
        >>> if ember.cuda.is_available():
        ...     ember.cuda.set_sync_debug_mode("warn"); ember.cuda.set_sync_debug_mode(0)
    """
    _lazy_init()
    if isinstance(debug_mode, str):
        if debug_mode not in _SYNC_MODES:
            raise RuntimeError("invalid value of debug_mode, expected one of `default`, "
                               "`warn`, `error`")
        debug_mode = _SYNC_MODES[debug_mode]
    _state["sync_debug_mode"] = int(debug_mode)


def get_sync_debug_mode():
    """The mode ``set_sync_debug_mode`` set: 0 (default), 1 (warn) or 2 (error)."""
    _lazy_init()
    return _state["sync_debug_mode"]


# index bounds checks queued on the GPU and not read yet: (a device array holding whether an
# index was out of range and the first such index, the exception for that index)
_CHECKS = []


def device_check(xp, bad, index, error):
    """Check cuda ``index`` on the device, as torch's kernels assert there: ``bad`` is its mask
    of indices out of range; nothing is read now (reading the result waited for the GPU at
    every gather, scatter, index_select or embedding call); the next copy to the host, or
    ``synchronize``, raises ``error(first bad index)``'s message as a RuntimeError."""
    flat = bad.reshape(-1)
    pos = flat.argmax()
    _CHECKS.append((xp.stack([xp.take(flat, pos).astype(np.int64),
                              xp.take(index.reshape(-1), pos).astype(np.int64)]), error))
    if len(_CHECKS) >= 256:     # (a program that never reads the GPU: memory stays bounded)
        raise_device_errors()


def raise_device_errors():
    """Read the queued checks (one copy per GPU) and raise the first failed one, as torch
    reports a device-side assert at the next synchronization."""
    if not _CHECKS:
        return
    checks, found = _CHECKS[:], {}
    _CHECKS.clear()
    xp = _lazy_init()
    for dev in {c.device.id for c, _ in checks}:
        rows = [i for i, (c, _) in enumerate(checks) if c.device.id == dev]
        with xp.cuda.Device(dev):
            found.update(zip(rows, xp.stack([checks[i][0] for i in rows]).get().tolist()))
    for i, (_, error) in enumerate(checks):
        if found[i][0]:
            raise RuntimeError(f"CUDA error: device-side assert triggered: {error(found[i][1])}")


def synchronizing():
    """Called by the cuda backend before it waits for the GPU (a copy to the host): the sync
    debug mode's warning or error, then the errors of the checks queued on the device."""
    mode = _state["sync_debug_mode"]
    if mode == 1:
        warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=4)
    elif mode == 2:
        raise RuntimeError("called a synchronizing CUDA operation")
    raise_device_errors()


def ipc_collect():
    """Release GPU memory other processes no longer share: ember never shares a cuda
    tensor's memory with another process (its ``multiprocessing`` shares host memory only),
    so there is none to release once CUDA is initialized.

    Example:
        >>> import ember
        >>> if ember.cuda.is_available():
        ...     ember.cuda.ipc_collect()
    """
    _lazy_init()


# ---- NVML: what nvidia-smi reports ---------------------------------------------------------
def _nvml(device=None):
    """pynvml, the NVML handle of ``device`` and its NVML index (CUDA_VISIBLE_DEVICES maps
    ember's indices to NVML's, which count every GPU)."""
    try:
        import pynvml
    except ImportError as e:
        raise ModuleNotFoundError("nvidia-ml-py does not seem to be installed or it can't be "
                                  "imported.") from e
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_DriverNotLoaded as e:
        raise RuntimeError("cuda driver can't be loaded, is cuda enabled?") from e
    idx = _index(device)
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    visible = [v.strip() for v in env.split(",") if v.strip()] if env else None
    if visible is not None:
        if not 0 <= idx < len(visible):
            raise RuntimeError(f"device {idx} is not visible (CUDA_VISIBLE_DEVICES={visible})")
        v = visible[idx]
        if v.isdigit():
            idx = int(v)
        else:           # a UUID (or its prefix), as nvidia-smi -L lists them
            n = pynvml.nvmlDeviceGetCount()
            uuids = [_str(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)))
                     for i in range(n)]
            idx = next((i for i, u in enumerate(uuids) if u.startswith(v)), None)
            if idx is None:
                raise RuntimeError("Can't get device UUIDs")
    return pynvml, pynvml.nvmlDeviceGetHandleByIndex(idx), idx


def _str(s):
    return s.decode() if isinstance(s, bytes) else s


def device_memory_used(device=None):
    """Bytes of the GPU's memory in use, by every process, as ``nvidia-smi`` reports."""
    nvml, h, _ = _nvml(device)
    return nvml.nvmlDeviceGetMemoryInfo(h).used


def memory_usage(device=None):
    """Percent of the last sample period (1/6 s to 1 s) the GPU's memory was read or
    written, as ``nvidia-smi`` reports."""
    nvml, h, _ = _nvml(device)
    return nvml.nvmlDeviceGetUtilizationRates(h).memory


def utilization(device=None):
    """Percent of the last sample period in which a kernel ran on the GPU (``nvidia-smi``).

    Example:
        >>> import ember
        >>> try:
        ...     u = ember.cuda.utilization()
        ... except (ModuleNotFoundError, RuntimeError):
        ...     pass    # no nvidia-ml-py, or no GPU
    """
    nvml, h, _ = _nvml(device)
    return nvml.nvmlDeviceGetUtilizationRates(h).gpu


def temperature(device=None):
    """The GPU die's temperature in degrees Celsius (``nvidia-smi``)."""
    nvml, h, _ = _nvml(device)
    return nvml.nvmlDeviceGetTemperature(h, 0)      # (0: the GPU die's sensor)


def power_draw(device=None):
    """The GPU's power draw in milliwatts (``nvidia-smi``)."""
    nvml, h, _ = _nvml(device)
    return nvml.nvmlDeviceGetPowerUsage(h)


def clock_rate(device=None):
    """The GPU's SM clock in MHz (``nvidia-smi``)."""
    nvml, h, _ = _nvml(device)
    return nvml.nvmlDeviceGetClockInfo(h, 1)        # (1: NVML_CLOCK_SM)


def list_gpu_processes(device=None):
    """The processes using the GPU and their memory, one line each, as torch prints them
    (a line saying why not where NVML cannot be asked).

    Example:
        >>> import ember
        >>> isinstance(ember.cuda.list_gpu_processes() if ember.cuda.is_available() else "", str)
        True
    """
    try:
        import pynvml
    except ImportError:
        return "pynvml module not found, please install nvidia-ml-py"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_DriverNotLoaded:
        return "cuda driver can't be loaded, is cuda enabled?"
    nvml, h, idx = _nvml(device)
    procs = nvml.nvmlDeviceGetComputeRunningProcesses(h)
    lines = [f"GPU:{idx}"] + ([] if procs else ["no processes are running"])
    lines += [f"process {p.pid:>10d} uses {p.usedGpuMemory / (1024 * 1024):>12.3f} MB GPU memory"
              for p in procs]
    return "\n".join(lines)
