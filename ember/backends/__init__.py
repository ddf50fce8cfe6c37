"""``torch.backends``: the flags programs set (``backends.cudnn.benchmark = True``,
``backends.cuda.matmul.allow_tf32 = True``...) as plain attributes, and the ``is_available()``
queries, answered for what ember really runs on.

ember runs NumPy on the CPU and CuPy on CUDA; it uses neither cuDNN nor oneDNN (mkldnn), so
those flags are kept for programs that set and read them back and change nothing else. Each
backend is a real submodule, so ``import ember.backends.cudnn as cudnn`` works too.

Example:
    >>> import ember
    >>> ember.backends.cudnn.benchmark = True
    >>> ember.backends.cudnn.benchmark
    True
    >>> ember.backends.cudnn.benchmark = False
"""
import contextlib
import importlib.util
import sys
import types

__all__ = ["cpu", "cuda", "cudnn", "mkl", "mkldnn", "mps", "openmp", "opt_einsum"]


def _submodule(name, doc, **attrs):
    mod = types.ModuleType(f"{__name__}.{name}", doc)
    mod.__dict__.update(attrs)
    sys.modules[mod.__name__] = mod
    return mod


def _flags_of(mod, names):
    """A ``flags(...)`` context manager that sets ``mod``'s flags and restores them after."""
    @contextlib.contextmanager
    def flags(**kw):
        unknown = set(kw) - set(names)
        if unknown:
            raise TypeError(f"flags() got unexpected keyword arguments {sorted(unknown)}")
        saved = {k: getattr(mod, k) for k in names}
        for k, v in kw.items():
            if v is not None:
                setattr(mod, k, v)
        try:
            yield
        finally:
            mod.__dict__.update(saved)
    return flags


def _blas_family(family):
    from .. import _config
    return any(f == family for f, _, _ in _config._controls())


class _MatmulFlags:
    """``backends.cuda.matmul``: TF32 and reduced-precision reduction switches."""

    def __init__(self):
        self.allow_tf32 = False
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True

    def __repr__(self):
        return f"<ember.backends.cuda.matmul allow_tf32={self.allow_tf32}>"


_sdp = {"flash": True, "mem_efficient": True, "math": True, "cudnn": True}


def _sdp_switches():
    out = {}
    for kind in _sdp:
        def enable(enabled, _k=kind):
            _sdp[_k] = bool(enabled)

        def enabled(_k=kind):
            return _sdp[_k]
        out[f"enable_{kind}_sdp"], out[f"{kind}_sdp_enabled"] = enable, enabled
    return out


cudnn = _submodule(
    "cudnn", "cuDNN flags: ember does not use cuDNN, so they are stored only.",
    enabled=True, benchmark=False, benchmark_limit=10, deterministic=False, allow_tf32=True,
    is_available=lambda: False, version=lambda: None)
cudnn.flags = _flags_of(cudnn, ("enabled", "benchmark", "deterministic", "allow_tf32"))
cuda = _submodule("cuda", "CUDA flags (ember runs CUDA through CuPy).", matmul=_MatmulFlags(),
                  is_built=lambda: importlib.util.find_spec("cupy") is not None,
                  preferred_linalg_library=lambda backend=None: "default", **_sdp_switches())
mkldnn = _submodule("mkldnn", "oneDNN flags: ember does not use oneDNN, so they are stored only.",
                    enabled=True, is_available=lambda: False)
mkldnn.flags = _flags_of(mkldnn, ("enabled",))
mkl = _submodule("mkl", "Whether the BLAS NumPy loaded is Intel MKL.",
                 is_available=lambda: _blas_family("mkl"))
openmp = _submodule("openmp", "Whether an OpenMP runtime is loaded in this process.",
                    is_available=lambda: _blas_family("omp"))
_has_opt_einsum = importlib.util.find_spec("opt_einsum") is not None
# NOTE: as in torch, the flag is on (strategy "auto") only where the package is installed
opt_einsum = _submodule("opt_einsum", "einsum contraction-order flags.",
                        enabled=_has_opt_einsum, strategy="auto" if _has_opt_einsum else None,
                        is_available=lambda: _has_opt_einsum)
mps = _submodule("mps", "Apple's Metal backend: ember has none.",
                 is_available=lambda: False, is_built=lambda: False)
cpu = _submodule("cpu", "CPU queries.", get_cpu_capability=lambda: "DEFAULT")
