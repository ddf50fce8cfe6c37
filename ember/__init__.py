"""ember: a small, fast deep-learning framework that speaks PyTorch's API.

``import ember as torch`` runs PyTorch programs; see README.md.
"""
__version__ = "0.1.0"

import gc as _gc
import os as _os

# OpenBLAS's idle threads spin for ~2^28 cycles after each call and starve ember's OpenMP
# kernels on the same cores; much shorter makes back-to-back small BLAS calls pay a wake-up
# each, so 2^18 (docs/performance-log.md). OpenBLAS reads the setting when NumPy loads it, so
# it only takes where ember is imported before NumPy; a user's own setting wins.
if "OPENBLAS_THREAD_TIMEOUT" not in _os.environ and "GOTO_THREAD_TIMEOUT" not in _os.environ:
    _os.environ["OPENBLAS_THREAD_TIMEOUT"] = "18"

# libgomp's idle threads spin for a long while after every parallel region (~300k rounds, ~8 ms
# on the Zen 3), and NumPy's OpenBLAS has its own thread pool: with as many threads as cores,
# long spinning starves BLAS's threads (causal attention at long sequences slows many times
# over), while no spinning makes every region pay a futex wake-up (a small GELU at 2 threads
# loses to one). A short spin keeps a thread warm between back-to-back kernels. libgomp reads
# this when it loads, so it is set at import (here: _config loads on first use), before the
# kernels or another library (torch, whose libgomp ember's kernels then share) loads one; a
# user's wait policy wins.
if "OMP_WAIT_POLICY" not in _os.environ and "GOMP_SPINCOUNT" not in _os.environ:
    _os.environ["GOMP_SPINCOUNT"] = "3000"

# NOTE: loading the package makes ~100k objects and no garbage, and the cyclic collector would
# walk them (and numpy's) many times on the way, so it is paused meanwhile. At the end they
# join the oldest generation (freeze + unfreeze, no walk), as they would after a few
# collections, rather than be walked by the first young collection after the import. (Young
# garbage from before the import waits for a full collection with them.)
_gc_was_enabled = _gc.isenabled()
_gc.disable()
try:
    from . import _dtype
    from ._device import device, get_default_device, get_device_module, set_default_device  # noqa: F401
    from ._dtype import (bfloat16, complex64, complex128, dtype, finfo, float8_e4m3fn,  # noqa: F401
                         float4_e2m1fn_x2, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz,
                         float8_e8m0fnu, float16, float32, float64, get_default_dtype, iinfo,
                         int8, int16, int32, int64, promote_types, set_default_dtype, uint8,
                         uint16, uint32, uint64)
    from ._storage import TypedStorage, UntypedStorage, is_storage  # noqa: F401
    from ._tensor import Size, Tensor  # noqa: F401

    bool = _dtype.bool_
    half, float, double = float16, float32, float64
    short, int, long = int16, int32, int64
    cfloat, cdouble = complex64, complex128

    from . import _C, _ops  # noqa: E402
    from . import _tensor_methods  # noqa: E402
    from ._ops.dispatch import can_cast as _can_cast  # noqa: E402

    _tensor_methods.install()
    _ops.install_methods(Tensor)
    globals().update(_ops.public_functions())
    conj = conj_physical = Tensor.conj      # (a real tensor is its own conjugate, not a copy)

    from . import autograd  # noqa: E402
    from ._ops.creation import (  # noqa: E402,F401
        arange, as_tensor, asarray, empty, empty_like, empty_permuted, empty_strided, eye,
        from_file, from_numpy, frombuffer, full, full_like, linspace, logspace, ones, ones_like,
        scalar_tensor, tensor, zeros, zeros_like)
    from ._ops.creation import legacy_range as range  # noqa: E402,F401  (torch.range)
    from ._ops.random import (  # noqa: E402,F401
        Generator, _sample_dirichlet, _standard_gamma, bernoulli, binomial, default_generator,
        get_rng_state, initial_seed, manual_seed, multinomial, normal, poisson, rand, rand_like,
        randint, randint_like, randn, randn_like, randperm, seed, set_rng_state)
    from ._sparse import (  # noqa: E402,F401
        layout, sparse_bsc, sparse_bsr, sparse_coo, sparse_csc, sparse_csr, strided)
    from ._memory_format import (  # noqa: E402,F401
        channels_last, channels_last_3d, contiguous_format, memory_format, preserve_format)
    legacy_contiguous_format = contiguous_format    # (the same object in torch)
    # joining's plain functions (_composites', _aten_nn's and _numerics' names load on first use)
    for _name, _f in _ops.joining.FUNCTIONS.items():
        globals().setdefault(_name, _f)
    del _name, _f
    _ops.lazy.install_stubs(Tensor)     # methods of the op families that load on first use
    from .autograd.grad_mode import (enable_grad, inference_mode,  # noqa: E402,F401
                                     is_grad_enabled, is_inference_mode_enabled, no_grad,
                                     set_grad_enabled)
    from .autograd.anomaly_mode import (is_anomaly_check_nan_enabled,  # noqa: E402,F401
                                        is_anomaly_enabled, set_anomaly_enabled)
finally:
    if not _gc.get_freeze_count():      # (leave a program's own frozen objects frozen)
        _gc.freeze()
        _gc.unfreeze()
    if _gc_was_enabled:
        _gc.enable()
    del _gc, _gc_was_enabled


import math as _math  # noqa: E402

pi, e, inf, nan = _math.pi, _math.e, _math.inf, _math.nan
newaxis = None      # (x[:, ember.newaxis] adds a dimension, as NumPy's)


def is_tensor(obj):
    """True if ``obj`` is an ember Tensor."""
    return isinstance(obj, Tensor)


def is_floating_point(input):
    return input.is_floating_point()


def is_complex(input):
    return input.is_complex()


def numel(input):
    return input.numel()


def result_type(tensor1, tensor2):
    """The dtype ``tensor1 op tensor2`` would have under torch's promotion rules."""
    dims, zeros, scalars = [], [], []
    for x in (tensor1, tensor2):
        if isinstance(x, Tensor):
            (dims if x.dim() else zeros).append(x.dtype)
        else:
            scalars.append(_dtype._scalar_dtype(x))
    return _dtype.result_type_of(dims, zeros, scalars)


def can_cast(from_, to):
    """Whether ``from_`` casts to ``to`` under torch's casting rules (no category drop)."""
    return _can_cast(from_, to)


_AUTOCAST_NAMES = ("autocast", "is_autocast_enabled", "get_autocast_dtype", "set_autocast_enabled",
                   "set_autocast_dtype", "is_autocast_cache_enabled",
                   "set_autocast_cache_enabled", "clear_autocast_cache",
                   "autocast_increment_nesting", "autocast_decrement_nesting",
                   "is_autocast_cpu_enabled", "set_autocast_cpu_enabled",
                   "get_autocast_cpu_dtype", "set_autocast_cpu_dtype", "get_autocast_gpu_dtype",
                   "set_autocast_gpu_dtype")


_CONFIG_NAMES = ("set_num_threads", "get_num_threads", "set_num_interop_threads",
                 "get_num_interop_threads", "use_deterministic_algorithms",
                 "are_deterministic_algorithms_enabled",
                 "is_deterministic_algorithms_warn_only_enabled",
                 "set_deterministic_debug_mode", "get_deterministic_debug_mode",
                 "set_float32_matmul_precision", "get_float32_matmul_precision",
                 "set_warn_always", "is_warn_always_enabled", "set_flush_denormal")

# torch's legacy tensor types and typed storages (FloatTensor, FloatStorage...), typename and
# set_default_tensor_type: made on first use
_LEGACY_NAMES = ("typename", "set_default_tensor_type") + tuple(
    n + suffix for n in ("Float", "Double", "Half", "BFloat16", "Byte", "Char", "Short", "Int",
                         "Long", "Bool") for suffix in ("Tensor", "Storage")) + (
    "ComplexFloatStorage", "ComplexDoubleStorage")


_EXTRA_NAMES = ("Stream", "Event", "OutOfMemoryError", "AcceleratorError", "FatalError",
                "JITException", "cond", "while_loop", "init_num_threads",
                "profiler_allow_cudagraph_cupti_lazy_reinit_cuda12")

_SUBMODULES = ("nn", "optim", "utils", "cuda", "distributed", "onnx", "jit", "fx", "export",
               "amp", "testing", "special", "fft", "linalg", "func", "backends", "profiler",
               "compiler", "_dynamo", "serialization", "sparse", "random", "return_types",
               "functional", "hub", "cpu", "distributions", "multiprocessing", "futures",
               "accelerator", "signal", "overrides", "library", "masked", "quasirandom", "types")

# Names loaded on first use: the module that has them (under the same name). autocast & co.
# live in amp/; thread counts and deterministic mode in _config (ctypes loads only when
# asked); save and load in serialization/, which loads zipfile and json; set_printoptions in
# _tensor_str, which loads with the first repr. torch.compile is ember.compiler.compile (the
# API, running eagerly for now), torch.vmap torch.func.vmap, torch.GradScaler
# torch.amp.GradScaler, torch.OutOfMemoryError torch.cuda's, torch.thread_safe_generator
# torch.random's, torch.ops the ops registered with ember.library.
_LAZY = {**dict.fromkeys(_AUTOCAST_NAMES, ".amp.autocast_mode"),
         **dict.fromkeys(_CONFIG_NAMES, "._config"), **dict.fromkeys(_EXTRA_NAMES, "._extras"),
         "OutOfMemoryError": ".cuda", "thread_safe_generator": ".random", "vmap": ".func",
         "ops": ".library", "DisableTorchFunction": ".overrides",
         "DisableTorchFunctionSubclass": ".overrides", "lobpcg": "._ops.lobpcg",
         "from_dlpack": "._dlpack", "to_dlpack": "._dlpack", "GradScaler": ".amp",
         "set_printoptions": "._tensor_str", "compile": ".compiler", "save": ".serialization",
         "load": ".serialization", "svd_lowrank": ".functional", "pca_lowrank": ".functional"}
# (these are looked up each time, as torch's are)
_UNCACHED = ("OutOfMemoryError", "thread_safe_generator", "vmap", "ops", "DisableTorchFunction",
             "DisableTorchFunctionSubclass")


def __getattr__(name):
    # Heavy or optional parts load on first use, so ``import ember`` stays fast.
    family = _ops.lazy.FUNCTIONS.get(name)
    if family is not None:          # an op of a family not loaded yet (see _ops/lazy.py)
        _ops.lazy.load(family)
        if name in globals():
            return globals()[name]
    import importlib
    if name in _SUBMODULES:
        try:
            mod = importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as e:
            if e.name == f"{__name__}.{name}":
                raise AttributeError(f"module 'ember' has no attribute '{name}' (not "
                                     "implemented yet)") from None
            raise
        globals()[name] = mod
        return mod
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        if name not in _UNCACHED:
            globals()[name] = value
        return value
    if name in _LEGACY_NAMES:
        from . import _tensor_types
        globals().update(_tensor_types.TYPES, **_storage.legacy_storage_types(),
                         typename=_tensor_types.typename,
                         set_default_tensor_type=_tensor_types.set_default_tensor_type)
        return globals()[name]
    if name in ("has_lapack", "has_spectral"):      # NumPy's linalg and fft are always there
        return True
    if name in ("has_mkl", "has_openmp"):
        return getattr(importlib.import_module(".backends", __name__), name[4:]).is_available()
    if name in ("Storage", "StorageBase"):          # (torch.Storage is FloatStorage)
        return __getattr__("FloatStorage") if name == "Storage" else UntypedStorage
    raise AttributeError(f"module 'ember' has no attribute '{name}'")


def __dir__():
    # with the names loaded on first use (but not the submodules, some not implemented yet)
    return sorted(set(globals()) | set(_ops.lazy.FUNCTIONS) | set(_AUTOCAST_NAMES) |
                  set(_CONFIG_NAMES) | set(_LEGACY_NAMES) |
                  {"save", "load", "set_printoptions", "svd_lowrank", "pca_lowrank", "GradScaler",
                   "from_dlpack", "to_dlpack", "compile", "lobpcg"})
