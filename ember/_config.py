"""Process-wide settings with torch's names: intra-op thread count (handed to the BLAS NumPy
loaded, and to OpenMP where a kernel library loaded it) and deterministic-algorithms mode.

ember has no thread pool of its own: the threads that matter are the BLAS library's and the
OpenMP runtime's of compiled kernels. Both are reached through ctypes, by looking up the
libraries already mapped into the process, as threadpoolctl does, so nothing new is needed at
runtime. Kernels read :func:`get_num_threads` to size their own parallel loops.
"""
import ctypes
import os
import sys

_state = {"threads": None, "interop": None, "deterministic": False, "warn_only": False,
          "matmul_precision": "highest", "warn_always": False}


def set_warn_always(b):
    """Whether warnings torch gives once per process (``TypedStorage is deprecated``...) are
    given every time."""
    _state["warn_always"] = bool(b)


def is_warn_always_enabled():
    return _state["warn_always"]

# (setter, getter) symbol names per library family; scipy-openblas (NumPy's wheels) prefixes and
# suffixes the 64-bit-integer build's symbols.
_SYMBOLS = {
    "openblas": [("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
                 ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
                 ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
                 ("openblas_set_num_threads", "openblas_get_num_threads")],
    "mkl": [("MKL_Set_Num_Threads", "MKL_Get_Max_Threads")],
    "blis": [("bli_thread_set_num_threads", "bli_thread_get_num_threads")],
    "omp": [("omp_set_num_threads", "omp_get_max_threads")],
}
_FAMILY_OF = (("openblas", "openblas"), ("mkl_rt", "mkl"), ("libmkl", "mkl"), ("blis", "blis"),
              ("gomp", "omp"), ("libomp", "omp"), ("iomp", "omp"))
_controllers = None


def _loaded_libraries():
    """Paths of the shared libraries mapped into this process (Linux, macOS; else NumPy's)."""
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/self/maps") as fh:
                return {ln.split(None, 5)[5].strip() for ln in fh
                        if ln.count(" ") >= 5 and ".so" in ln}
        except OSError:
            pass
    if sys.platform == "darwin":
        dyld = ctypes.CDLL(None)
        dyld._dyld_get_image_name.restype = ctypes.c_char_p
        return {dyld._dyld_get_image_name(i).decode() for i in range(dyld._dyld_image_count())}
    # Windows and others: the libraries NumPy's wheel ships beside it
    import numpy
    root = os.path.dirname(os.path.dirname(numpy.__file__))
    return {os.path.join(root, d, f) for d in ("numpy.libs", os.path.join("numpy", ".dylibs"))
            if os.path.isdir(os.path.join(root, d)) for f in os.listdir(os.path.join(root, d))}


def _find_controllers():
    """``[(family, setter, getter)]`` for every thread-count API found in the process."""
    found = []
    for path in sorted(_loaded_libraries()):
        name = os.path.basename(path).lower()
        family = next((f for key, f in _FAMILY_OF if key in name), None)
        if family is None:
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for set_name, get_name in _SYMBOLS[family]:
            setter, getter = getattr(lib, set_name, None), getattr(lib, get_name, None)
            if setter is not None and getter is not None:
                getter.restype = ctypes.c_int
                found.append((family, setter, getter))
                break
    return found


def _controls():
    global _controllers
    if _controllers is None:
        _controllers = _find_controllers()
    return _controllers


def _default_threads():
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0]
    if env.isdigit() and int(env) > 0:
        return int(env)
    for family, _, getter in _controls():
        if family != "omp":
            return int(getter())
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def set_num_threads(n):
    """Set the number of threads used for intra-op parallelism on the CPU (the BLAS NumPy uses,
    OpenMP in compiled kernels).

    Args:
        n (int): a positive thread count.

    Example:
        >>> import ember
        >>> n = ember.get_num_threads()
        >>> ember.set_num_threads(1)
        >>> ember.get_num_threads()
        1
        >>> ember.set_num_threads(n)
    """
    if type(n) is bool or not isinstance(n, int) or n <= 0:
        raise RuntimeError(f"set_num_threads expects a positive integer, got {n!r}")
    for _, setter, _ in _controls():
        setter(n)
    _state["threads"] = n


def get_num_threads():
    """The number of threads used for intra-op parallelism on the CPU.

    Example:
        >>> import ember
        >>> ember.get_num_threads() >= 1
        True
    """
    if _state["threads"] is None:
        _state["threads"] = _default_threads()
    return _state["threads"]


def set_num_interop_threads(n):
    """Set the number of threads for inter-op parallelism. ember runs ops one after another
    on the calling thread, so the value is kept for programs that read it back and does
    nothing else.

    Example:
        >>> import ember
        >>> ember.set_num_interop_threads(2)
        >>> ember.get_num_interop_threads()
        2
    """
    if type(n) is bool or not isinstance(n, int) or n <= 0:
        raise RuntimeError(f"set_num_interop_threads expects a positive integer, got {n!r}")
    _state["interop"] = n


def get_num_interop_threads():
    """The number of inter-op threads (see :func:`set_num_interop_threads`).

    Example:
        >>> import ember
        >>> ember.get_num_interop_threads() >= 1
        True
    """
    if _state["interop"] is None:
        _state["interop"] = get_num_threads()
    return _state["interop"]


def use_deterministic_algorithms(mode, *, warn_only=False):
    """Ask for deterministic algorithms. ember's CPU ops are deterministic already (NumPy
    reductions run in a fixed order); the flag is kept for kernels and programs that read it.

    Args:
        mode (bool): turn the mode on or off.
        warn_only (bool): warn instead of raising where an op has no deterministic version.

    Example:
        >>> import ember
        >>> ember.use_deterministic_algorithms(True)
        >>> ember.are_deterministic_algorithms_enabled()
        True
        >>> ember.use_deterministic_algorithms(False)
    """
    if not isinstance(mode, bool):
        raise TypeError(f"use_deterministic_algorithms(): argument 'mode' must be bool, not "
                        f"{type(mode).__name__}")
    _state["deterministic"], _state["warn_only"] = mode, bool(warn_only)


def are_deterministic_algorithms_enabled():
    """Whether :func:`use_deterministic_algorithms` turned the mode on."""
    return _state["deterministic"]


def is_deterministic_algorithms_warn_only_enabled():
    """Whether the deterministic mode only warns (``warn_only=True``)."""
    return _state["warn_only"]


def set_deterministic_debug_mode(debug_mode):
    """0/"default": off, 1/"warn": warn only, 2/"error": on (torch's levels)."""
    levels = {"default": 0, "warn": 1, "error": 2}
    level = levels.get(debug_mode, debug_mode)
    if level not in (0, 1, 2):
        raise RuntimeError(f"invalid value of debug_mode, expected one of 'default', 'warn', "
                           f"'error', 0, 1, 2, but got {debug_mode!r}")
    use_deterministic_algorithms(level > 0, warn_only=level == 1)


def get_deterministic_debug_mode():
    """The level set by :func:`set_deterministic_debug_mode` (0, 1 or 2)."""
    if not _state["deterministic"]:
        return 0
    return 1 if _state["warn_only"] else 2



def set_float32_matmul_precision(precision):
    """Set how float32 matmuls may trade precision for speed ("highest", "high", "medium") on
    hardware with TF32/bfloat16 units. NumPy's BLAS always computes in float32, so on the CPU
    this only records the choice (read back by :func:`get_float32_matmul_precision`).

    Example:
        >>> import ember
        >>> ember.set_float32_matmul_precision("high")
        >>> ember.get_float32_matmul_precision()
        'high'
        >>> ember.set_float32_matmul_precision("highest")
    """
    if precision not in ("highest", "high", "medium"):
        raise RuntimeError(f"Invalid precision {precision!r}: expected 'highest', 'high' or "
                           "'medium'")
    _state["matmul_precision"] = precision


def get_float32_matmul_precision():
    """The value set by :func:`set_float32_matmul_precision` (default "highest")."""
    return _state["matmul_precision"]


def set_flush_denormal(mode):
    """Flush denormal floats to zero (``mode=True``) or not, in the calling thread's SSE unit
    (x86-64 MXCSR bits FTZ and DAZ, as torch sets them); True where that was possible, False on
    other processors, where nothing changes.

    Example:
        >>> import ember
        >>> ember.set_flush_denormal(True)
        True
        >>> float(ember.tensor([1e-40]) * 1.0)
        0.0
        >>> ember.set_flush_denormal(False)
        True
    """
    import platform
    if platform.machine().lower() not in ("x86_64", "amd64") or sys.platform != "linux":
        return False
    # glibc's x86-64 fenv_t is 32 bytes with MXCSR last; fesetenv loads it into the SSE unit
    libm = ctypes.CDLL(None)
    env = (ctypes.c_uint32 * 8)()
    if libm.fegetenv(env) != 0:
        return False
    env[7] = env[7] | 0x8040 if mode else env[7] & ~0x8040
    return libm.fesetenv(env) == 0
