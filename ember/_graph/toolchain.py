"""Compiling, caching and loading ``ember.compile``'s generated kernels.

``load(c_source)`` gives the ctypes library of a graph's C source: compiled once by the system
C compiler (``compiler()``: ``$CC``, else cc/gcc/clang) into the disk cache (``cache_dir()``,
keyed by the source's hash, the compiler's version line and ``FLAGS``), written atomically,
then loaded; sources with CUDA kernels also get a ``_Libraries`` that compiles those with CuPy
(NVRTC) on first use. ``make`` binds a generated Python runner to the loaded kernels.
``cgen.py`` writes the sources; this module only builds and binds them.
"""
import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import types

import numpy as np

FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=fast",
         "-fopenmp", "-shared", "-fPIC")


def cache_dir():
    """Where compiled graphs are kept: ``$EMBER_CACHE_DIR``, else ``~/.cache/ember``."""
    return os.environ.get("EMBER_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                             "ember")


_cc = {}


def compiler():
    """``(path, version line)`` of the system C compiler (``$CC``, else cc/gcc/clang), or
    None where there is none."""
    if "cc" not in _cc:
        found = None
        for name in ([os.environ["CC"]] if os.environ.get("CC") else ["cc", "gcc", "clang"]):
            path = shutil.which(name)
            if path:
                try:
                    ver = _version(path)
                except (OSError, subprocess.SubprocessError, IndexError):
                    continue
                found = (path, ver)
                break
        _cc["cc"] = found
    return _cc["cc"]


def _version(path):
    """``path --version``'s first line, kept in the cache folder under the path, the compiler
    file's real path, size and modification time, so a process starts no compiler to make its
    keys."""
    st = os.stat(path)
    memo = os.path.join(cache_dir(), "cc-" + hashlib.sha256(repr(
        (path, os.path.realpath(path), st.st_size, st.st_mtime_ns)).encode()).hexdigest()[:16])
    if os.path.exists(memo):
        with open(memo) as f:
            return f.read()
    ver = subprocess.run([path, "--version"], capture_output=True, text=True,
                         timeout=30).stdout.splitlines()[0]
    try:
        os.makedirs(cache_dir(), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache_dir())     # (written aside, renamed into place)
        with os.fdopen(fd, "w") as f:
            f.write(ver)
        os.replace(tmp, memo)
    except OSError:             # (a read-only cache: asked again by the next process)
        pass
    return ver


_loaded = {}
used = {}   # file name -> path of the cache entries (.so, .joint) this process wrote or read


# what a CUDA kernel calls that C's math.h and vecmath.h give the cpu's (NVRTC has no headers)
CUDA_PRELUDE = r"""
#ifdef __CUDACC_RTC__
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
#endif
__device__ __forceinline__ float exp_f32(float x) { return expf(x); }
__device__ __forceinline__ float exp_nonpos_f32(float x) { return expf(x); }
__device__ __forceinline__ float erf_erfc_f32(float x, int) { return erff(x); }
template <class T> __device__ T phi_cdf(T x) { return (1 + erf(x * (T)0.7071067811865476)) / 2; }
template <class T> __device__ T gelu_grad(T x) {     // Phi(x) + x phi(x)
    return phi_cdf(x) + x * exp(-x * x / 2) * (T)0.3989422804014327; }
__device__ float gelu_exact_f32(float x) { return x * phi_cdf(x); }
__device__ double gelu_exact_f64(double x) { return x * phi_cdf(x); }
__device__ float gelu_grad_f32(float x) { return gelu_grad(x); }
__device__ double gelu_grad_f64(double x) { return gelu_grad(x); }
template <class A> __device__ A block_reduce(A v, int is_max) {
    __shared__ A part[256];
    part[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            A o = part[threadIdx.x + s], u = part[threadIdx.x];
            part[threadIdx.x] = is_max ? (o > u ? o : u) : u + o;
        }
        __syncthreads();
    }
    v = part[0];
    __syncthreads();
    return v;
}
"""
_modules = {}


class _Libraries:
    """A graph's kernels: the C library's (``lib``, None without C kernels) and, by
    ``kernel(name)``, the CUDA ones of ``cuda_source`` (one CuPy module, made on first use)."""

    def __init__(self, lib, cuda_source):
        self.lib, self.cuda_source = lib, CUDA_PRELUDE + cuda_source

    def __getattr__(self, name):
        return getattr(self.lib, name)

    def kernel(self, name):
        if self.cuda_source not in _modules:
            from .._backends import backend
            from .._device import device
            _modules[self.cuda_source] = backend(device("cuda")).xp.RawModule(
                code=self.cuda_source, options=("--std=c++14",))
        return _modules[self.cuda_source].get_function(name)


class Later(threading.Thread):
    """A library compiled in the background: ``result()`` waits for it (and raises what the
    build raised). Not a daemon: the process waits for it at exit, so the entry is written."""

    def __init__(self, build):
        super().__init__(name="ember.compile cc")
        self.build, self.out, self.err = build, None, None
        self.start()

    def run(self):
        try:
            self.out = self.build()
        except BaseException as e:      # (re-raised in the caller's thread)
            self.err = e

    def result(self):
        self.join()
        if self.err is not None:
            raise self.err
        return self.out


def load(c_source, later=False):
    """The ctypes library of ``c_source``: from the disk cache, else compiled now (written
    atomically: a temporary file renamed into place), or with ``later`` in the background (a
    ``Later``); with its CUDA kernels (blocks marked ``// cuda``), a ``_Libraries``. Raises
    RuntimeError when compiling fails or no compiler is found."""
    blocks = c_source.split("\n\n")
    cuda = [b for b in blocks if b.startswith("// cuda")]
    if cuda:
        rest = [b for b in blocks if not b.startswith("// cuda")]
        return _Libraries(load("\n\n".join(rest)) if any(
            not b.startswith("#include") for b in rest) else None, "\n\n".join(cuda))
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler")
    kdir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_C",
                        "kernels")
    from ..compiler._api import config
    key = hashlib.sha256("\0".join((c_source, cc[1], config.cache_key_tag) + FLAGS)
                         .encode()).hexdigest()[:32]
    fresh = config.force_disable_caches         # (compiled again, not kept on disk)
    if key in _loaded and not fresh:
        return _loaded[key]
    folder = os.path.join(cache_dir(), "codegen") if not fresh else tempfile.mkdtemp()
    path = os.path.join(folder, key + ".so")
    built = os.path.exists(path)

    def build():
        if not built:
            os.makedirs(folder, exist_ok=True)
            work = tempfile.mkdtemp(dir=folder)
            try:
                _build_so(cc[0], c_source, os.path.join(work, "out.so"), kdir)
                os.replace(os.path.join(work, "out.so"), path)
            finally:
                shutil.rmtree(work, ignore_errors=True)
        lib = ctypes.CDLL(path)
        if fresh:
            shutil.rmtree(folder, ignore_errors=True)
            return lib
        _loaded[key], used[key + ".so"] = lib, path
        return lib
    return Later(build) if later and not built and not fresh else build()


def _build_so(cc, c_source, out, kdir):
    """Compile ``c_source`` (include lines and kernels, in blocks parted by blank lines) into
    the shared library ``out``. The kernels are independent functions, so they are split over
    one translation unit per CPU (four kernels each at least), compiled in parallel and linked:
    each kernel's code is what a single unit gives, in a fraction of the wall time (the C
    compiler is most of a cold first call)."""
    blocks = c_source.split("\n\n")
    head = [b for b in blocks if b.startswith("#include")]
    body = [b for b in blocks if not b.startswith("#include")]
    parts = [[] for _ in range(max(1, min(os.cpu_count() or 1, len(body) // 4)))]
    for b in body:                  # (each kernel into the shortest part so far)
        min(parts, key=lambda q: sum(map(len, q))).append(b)
    srcs = [os.path.join(os.path.dirname(out), f"part{i}.c") for i in range(len(parts))]

    def run(*args):
        return subprocess.Popen([cc, *FLAGS, "-I", kdir, *args, "-lm"], stderr=subprocess.PIPE,
                                text=True)
    jobs = []
    for part, src in zip(parts, srcs):
        with open(src, "w") as f:
            f.write("\n\n".join(head + part))
        jobs.append(run(src, "-o", out) if len(parts) == 1 else
                    run(src, "-c", "-o", src[:-1] + "o"))
    errs = [j.communicate()[1] for j in jobs]
    if len(parts) > 1 and not any(j.returncode for j in jobs):
        jobs.append(run(*[src[:-1] + "o" for src in srcs], "-o", out))
        errs.append(jobs[-1].communicate()[1])
    for j, err in zip(jobs, errs):
        if j.returncode:
            raise RuntimeError(f"ember.compile: the C compiler failed:\n{err[-2000:]}")


def _into(acc, p, shape, dt):
    """The array of tensor ``acc[p]`` where it is C-contiguous, of ``shape`` and ``dt`` (a
    kernel may add into it)."""
    a = getattr(acc.get(p), "_data", None)
    return a if a is not None and a.shape == shape and a.dtype == dt and \
        a.flags.c_contiguous else None


def make(py_source, table, sigs, lib, buffers=None):
    """The function ``py_source`` (or its code object, from ``compile(py_source,
    "<ember.compile>", "exec")``) defines, bound to ``lib`` (whose kernels take ``sigs[name]``
    pointers and a thread count) and the helpers it calls."""
    from .._tensor import Tensor
    from .._C.kernels import contiguous, fast, num_threads, ptr

    from .._backends import array_module

    def buf(site, j, shape, dt, xp=np):
        if buffers is None:
            return xp.empty(shape, dt)
        b = buffers.get((site, j))
        if b is None or b.shape != shape:       # (new dynamic sizes)
            b = buffers[(site, j)] = xp.empty(shape, dt)
        return b
    fns = types.SimpleNamespace()
    for fname, (n, nv, *cuda) in sigs.items():
        if cuda:
            setattr(fns, fname, lib.kernel(fname))
            continue
        getattr(lib, fname).argtypes = [ctypes.c_void_p] * n + [ctypes.c_int64] * nv + [
            ctypes.c_int] * 2
        getattr(lib, fname).restype = None
        setattr(fns, fname, fast(getattr(lib, fname)))      # (no ctypes)
    env = {"_k": table, "_lib": fns, "_c": contiguous, "_p": ptr, "_nt": num_threads,
           "_xp": array_module, "_i64": np.int64, "_i32": np.int32,
           "_w": Tensor._wrap, "_buf": buf, "_none": {}, "_into": _into,
           "_float32": np.float32, "_float64": np.float64, "_bool": np.bool_}
    exec(compile(py_source, "<ember.compile>", "exec") if type(py_source) is str else py_source,
         env)
    return env["run"]

