"""TEST EMULATOR of CUDA ``RawKernel``s on the CPU: no GPU runs here.

``emulated_kernels(cupy)`` gives the cuda test double (``cuda_double.py``) CuPy's
``RawModule``, ``RawKernel`` and ``ElementwiseKernel`` for the length of a ``with`` block (the
last as a C++ loop over the elements running the kernel's operation), so ember's fused-kernel
launchers (``ember/cuda/_kernels.py``, ``ember/cuda/_attention.py``) run their own CUDA C
sources end to end. A source is compiled as C++ by the system compiler with a small shim:
each CUDA thread of a block is a fiber (``ucontext``), all on one OS thread and run in turn;
``__syncthreads()`` waits for every live thread of the block, and ``__shfl_xor_sync`` for the
32 lanes of its warp (exchanging values through a buffer), so a barrier or shuffle that not
all threads reach is a deadlock, reported as an error, as it would hang a GPU. Blocks run one
after another; ``__shared__`` arrays are per block (static, reused); ``atomicAdd`` is a plain
add (one thread runs at a time). Each argument must have its parameter's type and size (a
device array or ``numpy.uintp`` for a pointer, ``numpy.int64`` for ``long long``...), as CuPy,
which packs arguments by their own types, needs them to be.

What it proves: the kernels' indexing, tiling, masking, barriers and arithmetic as written
(float32/float64, and float16 where a kernel gives its 16-bit conversions a host path beside
the PTX one), and the launchers' arguments. What it does not: GPU memory ordering, warp scheduling,
speed, or CUDA's own math functions (the host's ``exp``/``log`` stand in).
"""
import contextlib
import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np

SHIM = r"""
#include <ucontext.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>
using std::exp; using std::fmax; using std::log; using std::max; using std::min;
using std::sqrt; using std::tanh; using std::erf;
struct dim3 { unsigned x = 1, y = 1, z = 1; };
static dim3 threadIdx, blockIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static

namespace emu {
enum { RUN, AT_BLOCK, AT_WARP, DONE };
struct Fiber { ucontext_t ctx; int state; std::vector<char> stack; };
static std::vector<Fiber> fibers;
static ucontext_t sched;
static int cur;
static double lanes[1024];
static void (*body)(void*);
static void* body_arg;
static int failed;

static void wait(int kind) {
    fibers[cur].state = kind;
    swapcontext(&fibers[cur].ctx, &sched);
}
static void entry() {
    body(body_arg);
    fibers[cur].state = DONE;
}
// releases the threads a barrier holds once all it waits for have arrived; false if none
static bool release() {
    int n = fibers.size();
    bool all = true;
    for (auto& f : fibers) all &= f.state == AT_BLOCK || f.state == DONE;
    if (all) {
        for (auto& f : fibers) if (f.state == AT_BLOCK) f.state = RUN;
        return true;
    }
    bool any = false;
    for (int w = 0; w < n; w += 32) {
        bool full = true, some = false;
        for (int t = w; t < std::min(n, w + 32); t++) {
            full &= fibers[t].state == AT_WARP || fibers[t].state == DONE;
            some |= fibers[t].state == AT_WARP;
        }
        if (full && some) {
            for (int t = w; t < std::min(n, w + 32); t++)
                if (fibers[t].state == AT_WARP) fibers[t].state = RUN;
            any = true;
        }
    }
    return any;
}
static void run_block(unsigned n, void (*fn)(void*), void* arg) {
    body = fn;
    body_arg = arg;
    fibers.assign(n, Fiber());
    for (unsigned i = 0; i < n; i++) {
        Fiber& f = fibers[i];
        f.stack.resize(1 << 16);
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack.data();
        f.ctx.uc_stack.ss_size = f.stack.size();
        f.ctx.uc_link = &sched;
        makecontext(&f.ctx, entry, 0);
        f.state = RUN;
    }
    for (;;) {
        bool ran = false, live = false;
        for (unsigned i = 0; i < n; i++) {
            if (fibers[i].state != RUN) continue;
            cur = i;
            threadIdx.x = i;
            ran = true;
            swapcontext(&sched, &fibers[i].ctx);
        }
        for (auto& f : fibers) live |= f.state != DONE;
        if (!live) return;
        if (!release() && !ran) {
            failed = 1;     // a barrier some threads never reach: a GPU would hang
            return;
        }
    }
}
template <class... P, std::size_t... I>
static void call(void (*k)(P...), void** args, std::index_sequence<I...>) {
    k(*static_cast<std::remove_reference_t<P>*>(args[I])...);
}
template <class... P>
static int launch(void (*k)(P...), unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                  void** args) {
    struct Job { void (*k)(P...); void** args; } job{k, args};
    failed = 0;
    gridDim = dim3{gx, gy, gz};
    blockDim = dim3{bx, 1, 1};
    for (unsigned z = 0; z < gz && !failed; z++)
        for (unsigned y = 0; y < gy && !failed; y++)
            for (unsigned x = 0; x < gx && !failed; x++) {
                blockIdx = dim3{x, y, z};
                run_block(bx, [](void* p) {
                    Job* j = static_cast<Job*>(p);
                    call(j->k, j->args, std::index_sequence_for<P...>{});
                }, &job);
            }
    return failed;
}
}  // namespace emu

static void __syncthreads() { emu::wait(emu::AT_BLOCK); }
template <class V> static V __shfl_xor_sync(unsigned, V v, int o) {
    int t = threadIdx.x, lane = t & 31;
    emu::lanes[t] = (double)v;
    emu::wait(emu::AT_WARP);
    V r = (V)emu::lanes[t - lane + (lane ^ o)];
    emu::wait(emu::AT_WARP);
    return r;
}
template <class V> static V atomicAdd(V* p, V v) { V old = *p; *p = old + v; return old; }
static float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
"""

_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(')


def _library(code, launchers=True):
    """The shared library of ``code`` with the shim and a launcher per kernel (or ``code``
    alone), compiled once per source (cached in the temp directory)."""
    names = _KERNEL.findall(code)
    src = code if not launchers else SHIM + code + "".join(
        f'\nextern "C" int emu_{n}(unsigned gx, unsigned gy, unsigned gz, unsigned bx, '
        f"void** args) {{ return emu::launch({n}, gx, gy, gz, bx, args); }}" for n in names)
    folder = os.path.join(tempfile.gettempdir(), "ember_cuda_emulator")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, hashlib.sha256(src.encode()).hexdigest()[:20] + ".so")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}"
        done = subprocess.run([compiler(), "-std=c++17", "-O1", "-shared", "-fPIC", "-w", "-x",
                               "c++", "-", "-o", tmp], input=src.encode(), capture_output=True)
        if done.returncode:
            raise RuntimeError(f"the emulator's compile failed:\n{done.stderr.decode()}")
        os.replace(tmp, path)
    return ctypes.CDLL(path)


_SCALARS = {np.dtype(np.int64): ctypes.c_int64, np.dtype(np.int32): ctypes.c_int32,
            np.dtype(np.float64): ctypes.c_double, np.dtype(np.float32): ctypes.c_float,
            np.dtype(np.uintp): ctypes.c_uint64}


class RawKernel:
    """``cupy.RawKernel``: ``kernel(grid, block, args)`` runs the kernel on the double's
    arrays (their NumPy memory) and NumPy scalars, as CuPy passes them."""

    def __init__(self, code, name, options=(), **kwargs):
        self.code, self.name = code, name
        self._fn = getattr(_library(code), "emu_" + name)
        self._params = _parameters(code, name)

    def __call__(self, grid, block, args, shared_mem=0):
        # CuPy packs each argument by its own type: one of another size than the kernel's
        # parameter shifts the rest on a GPU, so the emulator refuses what CuPy would garble
        if len(args) != len(self._params):
            raise TypeError(f"{self.name}: {len(args)} arguments for {len(self._params)} "
                            "parameters")
        keep = []
        for i, (a, (ctype, pointer)) in enumerate(zip(args, self._params)):
            if hasattr(a, "_a") and pointer:                  # a DeviceArray
                keep.append(ctypes.c_void_p(a._a.__array_interface__["data"][0]))
            elif isinstance(a, np.generic) and a.dtype in _SCALARS and (
                    a.dtype == np.uintp if pointer else _PARAM_TYPES.get(ctype) == a.dtype):
                keep.append(_SCALARS[a.dtype](a.item()))
            else:
                raise TypeError(f"{self.name}: argument {i} ({type(a).__name__} "
                                f"{getattr(a, 'dtype', '')}) for parameter {ctype}"
                                f"{' *' if pointer else ''}")
        ptrs = (ctypes.c_void_p * len(keep))(*[ctypes.addressof(k) for k in keep])
        gx, gy, gz = (tuple(grid) + (1, 1))[:3]
        if self._fn(gx, gy, gz, block[0], ptrs):
            raise RuntimeError(f"{self.name}: a barrier or shuffle that not every thread "
                               "reached (deadlock on a GPU)")


_PARAM_TYPES = {"long long": np.dtype(np.int64), "int": np.dtype(np.int32),
                "double": np.dtype(np.float64), "float": np.dtype(np.float32)}


def _parameters(code, name):
    """(C type, is a pointer) of each parameter of kernel ``name``, read from ``code`` after
    the preprocessor (the kernels' parameter lists are macros in places)."""
    done = subprocess.run([compiler(), "-E", "-P", "-x", "c++", "-D__global__=",
                           "-D__device__=", "-D__forceinline__=", "-"],
                          input=code.encode(), capture_output=True, check=True)
    src = re.sub(r"\s+", " ", done.stdout.decode())
    params = re.search(r'extern "C" void ' + name + r" ?\(([^)]*)\)", src).group(1)
    typedefs = dict((n, t) for t, n in re.findall(r"typedef ([\w ]+?) (\w+);", src))
    out = []
    for p in params.split(","):
        words = p.replace("*", " * ").replace("const", " ").split()[:-1]
        base = " ".join(w for w in words if w != "*")
        out.append((typedefs.get(base, base), "*" in words))
    return out


_CTYPES = {np.dtype(np.float16): "float16", np.dtype(np.float32): "float",
           np.dtype(np.float64): "double", np.dtype(np.int32): "int",
           np.dtype(np.int64): "long long"}


class ElementwiseKernel:
    """``cupy.ElementwiseKernel``: ``operation`` runs once per element (a C++ loop; ``float16`` is
    the host's ``_Float16``), inputs as values and outputs as references, as CuPy binds them;
    the type ``T`` is the first array's that is declared ``T``; outputs not given are made."""

    def __init__(self, in_params, out_params, operation, name="kernel", preamble="", **kwargs):
        def parse(params):
            return [p.split() for p in params.split(",")]
        self.ins, self.outs = parse(in_params), parse(out_params)
        self.operation, self.name, self.preamble = operation, name, preamble
        self._fns = {}

    def __call__(self, *args):
        import cupy     # the double's, as installed by cuda_double()
        params = self.ins + self.outs
        arrays = [a._a if hasattr(a, "_a") else None for a in args]
        t = next(a.dtype for (ty, _), a in zip(params, arrays) if a is not None and ty == "T")
        types = [t if ty == "T" else np.dtype({"int32": np.int32, "float32": np.float32,
                                               "float64": np.float64}[ty]) for ty, _ in params]
        shape = np.broadcast_shapes(*(a.shape for a in arrays if a is not None))
        host = [np.ascontiguousarray(np.broadcast_to(a if a is not None else np.asarray(
            v, dt), shape), dt) for a, v, dt in zip(arrays, args, types)]
        made = [cupy.empty(shape, dt) for dt in types[len(args):]]
        host += [m._a for m in made]
        fn = self._fns.get(t) or self._compile(t, types)
        self._fns[t] = fn
        ptrs = (ctypes.c_void_p * len(host))(*[h.ctypes.data for h in host])
        fn(ctypes.c_int64(int(np.prod(shape))), ptrs)
        for a, h, (ty, _) in zip(args[len(self.ins):], host[len(self.ins):], self.outs):
            a._a[...] = h                                      # outputs given: written back
        outs = list(args[len(self.ins):]) + made
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _compile(self, t, types):
        params = self.ins + self.outs
        binds = "".join(
            f"{'const ' if i < len(self.ins) else ''}{_CTYPES[dt]}"
            f"{'' if i < len(self.ins) else '&'} {name} = (({_CTYPES[dt]}*)emu_p[{i}])[emu_i];\n"
            for i, ((_, name), dt) in enumerate(zip(params, types)))
        src = (f"#include <cmath>\nusing namespace std;\ntypedef _Float16 float16;\n"
               f"typedef {_CTYPES[t]} T;\n{self.preamble}\n"
               f'extern "C" void run(long long n, void** emu_p) {{\n'
               f"for (long long emu_i = 0; emu_i < n; emu_i++) {{\n{binds}{self.operation}"
               "\n}\n}\n")
        return _library(src, launchers=False).run


class RawModule:
    """``cupy.RawModule(code=...)``: ``get_function(name)`` gives its kernels."""

    def __init__(self, code, options=(), **kwargs):
        self.code = code

    def get_function(self, name):
        return RawKernel(self.code, name)


@contextlib.contextmanager
def emulated_kernels(cupy):
    """The double ``cupy`` with ``RawKernel`` and ``RawModule`` inside the block: ember's
    fused-kernel paths (those built on them) then run, emulated."""
    from ember.cuda import _attention, _kernels
    from ember._graph import toolchain
    caches = (_kernels._rows_kernel, _kernels._elementwise, _attention._functions,
              toolchain._modules)        # (compile's modules, by source)
    for c in caches:
        getattr(c, "cache_clear", getattr(c, "clear", None))()
    names = {"RawKernel": RawKernel, "RawModule": RawModule, "ElementwiseKernel": ElementwiseKernel}
    before = {n: cupy.__dict__[n] for n in names if n in cupy.__dict__}
    cupy.__dict__.update(names)
    try:
        yield cupy
    finally:
        for n in names:     # the double's own (an ElementwiseKernel that cannot compile) back
            del cupy.__dict__[n]
        cupy.__dict__.update(before)
        for c in caches:
            getattr(c, "cache_clear", getattr(c, "clear", None))()


def compiler():
    """The C++ compiler the emulator uses, or None."""
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
