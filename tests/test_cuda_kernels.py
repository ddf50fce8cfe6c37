"""ember's fused CUDA kernels (``ember/cuda/_kernels.py``): softmax/log_softmax,
layer_norm/rms_norm, gelu and the Adam(W) update.

Without a GPU: their CUDA C compiles with NVRTC where NVRTC is installed (the
``nvidia-cuda-nvrtc-cu12`` wheel; skipped otherwise), and the test double (which has no
``RawKernel``) takes the ``xp`` path. On a GPU (``-m cuda``): each kernel equals the ``xp`` code
it replaces (``EMBER_CUDA_FUSED=0``) and the cpu result, forward and backward."""
import ctypes
import glob
import os

import numpy as np
import pytest

import ember
from cuda_double import cuda_double
from ember.cuda import _kernels as K

F = ember.nn.functional


def _nvrtc():
    """NVRTC's library, from the nvidia-cuda-nvrtc-cu12 wheel or the system, or None."""
    import ctypes.util
    import importlib.util
    paths = []
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        paths += glob.glob(os.path.join(root, "cuda_nvrtc", "lib", "libnvrtc.so*"))
    name = ctypes.util.find_library("nvrtc")
    for p in paths + ([name] if name else []):
        try:
            return ctypes.CDLL(p)
        except OSError:
            continue
    return None


def _compile(lib, src):
    prog, opts = ctypes.c_void_p(), [b"--gpu-architecture=compute_80", b"--std=c++17"]
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"k.cu", 0, None, None) == 0
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    n = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetProgramLog(prog, log)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return rc, log.value.decode()


# CuPy's elementwise kernels see ``float16`` as a class converting to and from float: a stand-in
_FLOAT16 = ("struct float16 { float v; __device__ float16(float f) : v(f) {}\n"
            "  __device__ operator float() const { return v; } };\n")


def test_kernel_sources_compile_with_nvrtc():
    lib = _nvrtc()
    if lib is None:
        pytest.skip("NVRTC is not installed (pip install nvidia-cuda-nvrtc-cu12)")
    sources = [K._ROWS % {"T": t, "A": a} for t, a in K._TYPES.values()]
    for t in ("float", "double", "float16"):     # the elementwise bodies, as CuPy wraps them
        sources.append(_FLOAT16 + K._GELU_PRE + "".join(
            f"template <typename T> __device__ void {name}(T x, T g, int approx, T& y, T& gx)"
            f" {{\n{body}\n}}\n" for name, body in (("f", K._GELU_FWD), ("b", K._GELU_BWD))) +
            f'extern "C" __global__ void k({t}* x) {{ {t} y(0.f), gx(0.f);\n'
            f"f<{t}>(x[0], x[1], 1, y, gx); b<{t}>(x[0], x[1], 0, y, gx); x[2] = y; }}")
    for t in ("float", "double"):
        for ams in (("", "v"), ("vmax = vmax > v ? vmax : v;", "vmax")):
            sources.append(
                f"typedef {t} T;\n" 'extern "C" __global__ void k(T* a, T g, T beta1, T beta2,'
                " T one_minus_beta2, T eps, T step_size, T decay) {\n"
                "T p = a[0], m = a[1], v = a[2], vmax = a[3];\n" + K._ADAM % ams +
                "a[0] = p; a[1] = m; a[2] = v; a[3] = vmax; }")
    for src in sources:
        rc, log = _compile(lib, src)
        assert rc == 0, log


def test_fused_kernels_are_off_on_the_double_and_by_the_environment(monkeypatch):
    with cuda_double() as cupy:
        assert not K.enabled(cupy)
        x = ember.randn(4, 8, device="cuda")
        assert K.softmax(x._data, None, -1, 0) is None and K.fusable(x._data) is None
        np.testing.assert_allclose(F.softmax(x, -1).cpu().numpy(),
                                   F.softmax(x.cpu(), -1).numpy(), rtol=1e-6)
    assert not K.enabled(np)
    monkeypatch.setenv("EMBER_CUDA_FUSED", "0")
    fake = type("xp", (), {"RawKernel": object})
    assert not K.enabled(fake)
    monkeypatch.setenv("EMBER_CUDA_FUSED", "1")
    assert K.enabled(fake)


# ---- on a GPU -------------------------------------------------------------------------------
SHAPES = [(3, 1), (5, 7), (4, 256), (2, 3, 1000), (2, 5000)]
TOL = {ember.float32: (2e-5, 2e-6), ember.float64: (1e-12, 1e-13), ember.float16: (2e-3, 2e-3)}


def _both(fn, monkeypatch):
    """``fn()`` with the fused kernels and with the ``xp`` code, as host arrays."""
    out = []
    for flag in ("1", "0"):
        monkeypatch.setenv("EMBER_CUDA_FUSED", flag)
        res = fn()
        out.append([r.detach().cpu().double().numpy() for r in
                    (res if isinstance(res, tuple) else (res,))])
    return out


def _close(a, b, dt):
    rtol, atol = TOL[dt]
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


@pytest.mark.cuda
@pytest.mark.parametrize("dt", [ember.float32, ember.float64], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layer_norm", "rms_norm"])
def test_rows_kernels_equal_the_xp_code(monkeypatch, name, shape, dt):
    ember.manual_seed(0)
    x0 = (ember.randn(*shape, dtype=dt) * 3).cuda()
    n = shape[-1]
    w, b = ember.randn(n, dtype=dt, device="cuda"), ember.randn(n, dtype=dt, device="cuda")
    g = ember.randn(*shape, dtype=dt, device="cuda")

    def run(dev="cuda"):
        x, wd, bd, gd = (t.to(dev) for t in (x0, w, b, g))
        x = x.clone().requires_grad_()
        y = {"softmax": lambda: F.softmax(x, -1), "log_softmax": lambda: F.log_softmax(x, -1),
             "layer_norm": lambda: F.layer_norm(x, (n,), wd, bd),
             "rms_norm": lambda: F.rms_norm(x, (n,), wd)}[name]()
        (gx,) = ember.autograd.grad(y, x, gd)
        return y, gx
    fused, ref = _both(run, monkeypatch)
    _close(fused, ref, dt)
    _close(fused, [t.detach().double().numpy() for t in run("cpu")], dt)


@pytest.mark.cuda
@pytest.mark.parametrize("dt", [ember.float16, ember.float32, ember.float64], ids=str)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_kernel_equals_the_xp_code(monkeypatch, dt, approximate):
    x0 = ember.linspace(-6, 6, 10001, dtype=dt, device="cuda")

    def run():
        x = x0.clone().requires_grad_()
        y = F.gelu(x, approximate=approximate)
        (gx,) = ember.autograd.grad(y, x, ember.ones_like(y))
        return y, gx
    fused, ref = _both(run, monkeypatch)
    _close(fused, ref, dt)


@pytest.mark.cuda
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("opt", ["Adam", "AdamW"])
def test_adam_kernel_equals_the_xp_code(monkeypatch, opt, amsgrad):
    def run():
        ember.manual_seed(0)
        w = ember.nn.Parameter(ember.randn(300, 7, device="cuda"))
        o = getattr(ember.optim, opt)([w], lr=0.05, weight_decay=0.1, amsgrad=amsgrad)
        for _ in range(5):
            o.zero_grad()
            (w.sin() * w).sum().backward()
            o.step()
        return w, o.state[w]["exp_avg"], o.state[w]["exp_avg_sq"]
    fused, ref = _both(run, monkeypatch)
    _close(fused, ref, ember.float32)


@pytest.mark.cuda
def test_softmax_off_the_last_dim_and_double_backward_take_the_xp_code():
    x = ember.randn(4, 6, 5, device="cuda", dtype=ember.float64, requires_grad=True)
    y = F.softmax(x, 1)
    np.testing.assert_allclose(y.detach().cpu().numpy(),
                               F.softmax(x.detach().cpu(), 1).numpy(), rtol=1e-12)
    (g,) = ember.autograd.grad(F.log_softmax(x, -1).square().sum(), x, create_graph=True)
    g.sum().backward()          # through ember ops: the kernels do not run under grad mode
    xc = x.detach().cpu().requires_grad_()
    (gc,) = ember.autograd.grad(F.log_softmax(xc, -1).square().sum(), xc, create_graph=True)
    gc.sum().backward()
    np.testing.assert_allclose(x.grad.cpu().numpy(), xc.grad.numpy(), rtol=1e-9, atol=1e-12)
