"""glibc malloc settings for the cpu backend's arrays.

A training step allocates and frees the same few hundred arrays every step. glibc serves a
block above its mmap threshold with a fresh ``mmap`` and gives the top of its heap back to the
kernel once more than the trim threshold is free there; both thresholds start small (128 KiB)
and only the first adapts. So each step's activations, freed in backward, go back to the
kernel, and the next forward faults every page of them in again (ten times torch's page
faults on the GPT benchmark: docs/performance-log.md). Fixing both thresholds keeps a step's working set mapped for the next one, as a caching
allocator would; memory above the trim threshold still goes back, and blocks above 32 MiB
(glibc's ceiling for the mmap threshold) are still their own mappings, freed at once.

``EMBER_MALLOC_TUNING=0`` leaves malloc alone, and so does any ``MALLOC_*_`` setting of the
user's own (or ``GLIBC_TUNABLES``).
"""
import os
import sys

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3      # mallopt's parameter numbers (malloc.h)
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 256 << 20
_USER_KNOBS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
               "MALLOC_MMAP_MAX_", "GLIBC_TUNABLES")


def tune():
    """Set the two thresholds once for the process (glibc on Linux only); True if set."""
    if not sys.platform.startswith("linux") or os.environ.get("EMBER_MALLOC_TUNING") == "0" \
            or any(k in os.environ for k in _USER_KNOBS):
        return False
    import ctypes       # (already loaded by NumPy: costs nothing at import)
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version       # glibc's own symbol: not musl's no-op mallopt
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and \
        bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
