"""ember's fused CUDA kernels (``ember/cuda/_kernels.py``, ``ember/cuda/_attention.py``):
softmax/log_softmax, layer_norm/rms_norm, gelu, cross_entropy, embedding's backward, the
Adam(W) update and flash-style scaled_dot_product_attention.

Without a GPU: their CUDA C compiles with NVRTC to sm_80 machine code (so ptxas checks the
inline PTX, and each kernel's registers and shared memory must allow its launch) where NVRTC
is installed (the ``nvidia-cuda-nvrtc-cu12`` wheel; skipped otherwise); the test double (which
has no ``RawKernel``) takes the ``xp`` path, and the attention kernels' reference (the
blockwise ember-op path, masks included) is checked against torch. The ``kernels`` fixture's
tests run the RawKernels themselves: emulated on the cpu inside the double on every run
(``cuda_emulator.py``; float32/float64, small sizes), and on a GPU with ``-m cuda``. Each
kernel equals the ``xp`` code it replaces (``EMBER_CUDA_FUSED=0``) and the cpu result,
forward and backward."""
import re
import contextlib
import ctypes
import glob
import os

import numpy as np
import pytest

import ember
import cuda_emulator
from cuda_double import cuda_double
from ember.cuda import _attention as KA
from ember.cuda import _kernels as K
from ember.nn import _attention

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


def _compile(lib, src, arch="sm_80"):
    """NVRTC's return code and log for ``src`` compiled to ``arch``'s SASS (ptxas runs, and
    with ``-v`` logs each kernel's registers and shared memory)."""
    prog, opts = ctypes.c_void_p(), [f"--gpu-architecture={arch}".encode(), b"--std=c++17",
                                     b"--ptxas-options=-v"]
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


def _launchable(log, threads):
    """Each kernel's registers times ``threads`` fit an SM's 64K registers, its static shared
    memory the 48 KiB a launch may use without opting in, and nothing spills to local
    memory."""
    regs = [int(r) for r in re.findall(r"Used (\d+) registers", log)]
    smem = [int(s) for s in re.findall(r"(\d+) bytes smem", log)]
    assert regs and all(r * threads <= 65536 for r in regs), log
    assert all(s <= 48 * 1024 for s in smem), log
    return sum(int(s) for s in re.findall(r"(\d+) bytes spill stores", log))


def _need_nvrtc():
    lib = _nvrtc()
    if lib is None:
        pytest.skip("NVRTC is not installed (pip install nvidia-cuda-nvrtc-cu12)")
    return lib


# every storage type once, each mask kind, a head dim that is no multiple of 8 and dq != dv
ATTENTION_BUILDS = [(np.float32, 64, 64, 0), (np.float16, 40, 24, 1), (np.float64, 128, 128, 2),
                    (KA._bf16, 256, 256, 2)]


@pytest.mark.parametrize("build", ATTENTION_BUILDS, ids=lambda b: "{}-{}x{}-mask{}".format(
    np.dtype(b[0]), *b[1:]))
def test_attention_kernels_compile_to_launchable_code(build):
    """The attention kernels' source as ember instantiates it (storage type, head dims, mask
    kind). bfloat16 compiles, though CuPy has no bfloat16 arrays to run it on."""
    dt, dq, dv, mask = build
    rc, log = _compile(_need_nvrtc(), KA.source(np.dtype(dt), dq, dv, mask))
    assert rc == 0 and "warning" not in log, log
    spills = _launchable(log, KA.G * KA.BR)
    assert spills == 0 or dt is np.float64, log      # (float64 at 128: a few spills)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])      # A100, H100/H200
@pytest.mark.parametrize("dt", list(KA.TYPES), ids=lambda d: np.dtype(d).name)
def test_every_attention_build_compiles(dt, arch):
    lib = _need_nvrtc()
    for mask in (0, 1, 2):
        for dq, dv in ((16, 16), (64, 64), (128, 64), (256, 256)):
            rc, log = _compile(lib, KA.source(dt, dq, dv, mask), arch)
            assert rc == 0 and "warning" not in log, log
            _launchable(log, KA.G * KA.BR)


def test_kernel_sources_compile_with_nvrtc():
    lib = _need_nvrtc()
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
        assert _launchable(log, K._THREADS) == 0, log


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


# ---- the attention kernels' reference and launch arguments, without a GPU -------------------

def _masks(rng, lead, L, S):
    """A boolean mask with a row that sees no key, and additive ones broadcast over heads
    (one with -inf entries), as (name, numpy array)."""
    keep = rng.random((L, S)) > 0.4
    keep[1] = False
    add = rng.standard_normal(lead[-1:] + (1, S))
    add[0, 0, :2] = -np.inf
    return [("bool", keep), ("additive", add), ("additive-full", rng.standard_normal(
        lead + (L, S)))]


def _torch_sdpa(q, k, v, mask=None, causal=False, gqa=False, lib=None):
    """(output gradient, [output, dq, dk, dv]) of attention on the cpu by ``lib`` (torch; or
    ember's cpu, itself checked against torch, where a GPU machine may lack torch)."""
    if lib is None:
        import torch as lib
    ts = [lib.tensor(a, requires_grad=True) for a in (q, k, v)]
    out = lib.nn.functional.scaled_dot_product_attention(
        *ts, attn_mask=None if mask is None else lib.tensor(mask), is_causal=causal,
        enable_gqa=gqa)
    g = np.random.default_rng(9).standard_normal(tuple(out.shape))
    out.backward(lib.tensor(g))
    return g, [out.detach().numpy()] + [t.grad.numpy() for t in ts]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_blockwise_reference_takes_masks_as_torch(monkeypatch, device):
    """The ember-op path the CUDA kernels are tested against (and the path the test double
    runs): masks, fully masked rows, causal and grouped-query heads, several key blocks."""
    monkeypatch.setattr(_attention, "BLOCK", 4)
    rng = np.random.default_rng(0)
    lead, L, S = (2, 4), 7, 10
    q, k, v = rng.standard_normal(lead + (L, 6)), rng.standard_normal(lead + (S, 6)), \
        rng.standard_normal(lead + (S, 5))
    cases = [(n, m, False) for n, m in _masks(rng, lead, L, S)] + [("causal", None, True)]
    with cuda_double() if device == "cuda" else contextlib.nullcontext():
        for name, mask, causal in cases:
            g, want = _torch_sdpa(q, k, v, mask, causal)
            ts = [ember.tensor(a, device=device, requires_grad=True) for a in (q, k, v)]
            out = _attention.flash_attention(*ts, causal, None, None if mask is None else
                                             ember.tensor(mask, device=device))
            out.backward(ember.tensor(g, device=device))
            for got, w in zip([out] + [t.grad for t in ts], want):
                assert got.device.type == device
                np.testing.assert_allclose(got.detach().cpu().numpy(), w, rtol=1e-10,
                                           atol=1e-12, err_msg=name)
        kv = [ember.tensor(a[:, :2], device=device) for a in (k, v)]      # 4 query heads, 2 kv
        g, want = _torch_sdpa(q, k[:, :2], v[:, :2], gqa=True)
        out = _attention.flash_attention(ember.tensor(q, device=device), *kv)
        np.testing.assert_allclose(out.cpu().numpy(), want[0], rtol=1e-10, atol=1e-12)


def test_naive_attention_gives_zeros_for_a_fully_masked_row():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 5, 4))
    mask = rng.random((5, 5)) > 0.3
    mask[2] = False
    g, want = _torch_sdpa(q, q, q, mask)
    ts = [ember.tensor(q, requires_grad=True) for _ in range(3)]
    out = F.scaled_dot_product_attention(*ts, attn_mask=ember.tensor(mask))
    out.backward(ember.tensor(g))
    for got, w in zip([out] + [t.grad for t in ts], want):
        np.testing.assert_allclose(got.detach().numpy(), w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shape", [(5, 6), (4, 1, 6), (1, 4, 5, 6), (2, 4, 1, 1)], ids=str)
def test_attention_mask_offsets_address_the_broadcast_mask(shape):
    """The kernels read mask element (h, i, j) at ``moff[h] + i * sr + j * sc`` from the
    broadcast view's first element: checked here on NumPy views of the same strides,
    including a transposed (non-contiguous) mask."""
    lead, L, S = (2, 4), 5, 6
    base = np.random.default_rng(2).standard_normal(shape[::-1]).astype(np.float32)
    for mask in (np.ascontiguousarray(base.T), base.T):
        kind, (m, moff, sr, sc) = KA._mask_args(np, mask, lead, L, S, np.float32)
        assert kind == 2
        full = np.broadcast_to(mask, lead + (L, S)).reshape(-1, L, S)
        start = m.__array_interface__["data"][0] - mask.__array_interface__["data"][0]
        owner = mask if mask.base is None else mask.base
        first = mask.__array_interface__["data"][0] - owner.__array_interface__["data"][0]
        for h in range(full.shape[0]):
            got = np.ndarray((L, S), np.float32, owner, first + start + int(moff[h]) * 4,
                             (int(sr) * 4, int(sc) * 4))
            np.testing.assert_array_equal(got, full[h])


# ---- the kernels run: emulated on the cpu, or on a GPU ---------------------------------------

@pytest.fixture(params=["emulated", pytest.param("gpu", marks=pytest.mark.cuda)])
def kernels(request):
    """Where the fused RawKernels run: on every run, emulated on the cpu inside the test
    double (``tests/cuda_emulator.py``: the kernels' own CUDA C, float32/float64, at small
    sizes); with ``-m cuda`` on a GPU, by CuPy."""
    if request.param == "gpu":
        yield "gpu"
        return
    if not cuda_emulator.compiler():
        pytest.skip("no C++ compiler for the kernel emulator")
    with cuda_double() as cupy, cuda_emulator.emulated_kernels(cupy):
        yield "emulated"


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


def _close(a, b, dt, scale=1.0):
    rtol, atol = TOL[dt]
    atol *= scale
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dt", [ember.float32, ember.float64], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layer_norm", "rms_norm"])
def test_rows_kernels_equal_the_xp_code(monkeypatch, kernels, name, shape, dt):
    ember.manual_seed(0)
    ran = _count_launches(monkeypatch, K, "softmax", "norm")
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
    assert ran == (["softmax", "softmax"] if "softmax" in name else ["norm"])
    # a norm over rows of one element has variance 0: its gradient (exactly 0) is the
    # difference of equal terms times 1/sqrt(eps), so rounding shows ~300x amplified
    scale = 1e3 if "norm" in name and n == 1 else 1.0
    _close(fused, ref, dt, scale)
    _close(fused, [t.detach().double().numpy() for t in run("cpu")], dt, scale)


@pytest.mark.parametrize("dt", [ember.float16, ember.float32, ember.float64], ids=str)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_kernel_equals_the_xp_code(monkeypatch, kernels, dt, approximate):
    x0 = ember.linspace(-6, 6, 10001, dtype=dt, device="cuda")
    ran = _count_launches(monkeypatch, K, "gelu")

    def run():
        x = x0.clone().requires_grad_()
        y = F.gelu(x, approximate=approximate)
        (gx,) = ember.autograd.grad(y, x, ember.ones_like(y))
        return y, gx
    fused, ref = _both(run, monkeypatch)
    assert ran == ["gelu", "gelu"]
    _close(fused, ref, dt)


@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("opt", ["Adam", "AdamW"])
def test_adam_kernel_equals_the_xp_code(monkeypatch, kernels, opt, amsgrad):
    ran = _count_launches(monkeypatch, K, "adam")

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
    assert ran == ["adam"] * 5
    _close(fused, ref, ember.float32)


def test_softmax_off_the_last_dim_and_double_backward_take_the_xp_code(kernels):
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


def _count_launches(monkeypatch, module, *names):
    """The names of ``module``'s launchers that ran a kernel (returned something)."""
    ran = []
    for name in names:
        def wrapped(*args, _real=getattr(module, name), _name=name, **kwargs):
            res = _real(*args, **kwargs)
            if res is not None and res is not False:
                ran.append(_name)
            return res
        monkeypatch.setattr(module, name, wrapped)
    return ran


ATTENTION_SMALL = {        # the emulator's sizes: two query blocks, two key tiles
    "plain": ((1, 2, 2, 40, 45, 16, 16), False, None),
    "causal-wide": ((1, 2, 2, 20, 45, 16, 16), True, None),
    "causal-tall": ((1, 2, 2, 45, 20, 16, 16), True, None),
    "bool": ((2, 2, 2, 33, 36, 8, 8), False, "bool"),
    "additive": ((2, 2, 2, 33, 36, 8, 8), False, "additive"),
    "additive-full": ((2, 2, 2, 9, 40, 8, 8), False, "additive-full"),
    "gqa": ((1, 4, 2, 33, 33, 8, 8), True, None),
    "dims": ((1, 1, 1, 35, 37, 12, 20), False, "bool"),
}
ATTENTION_CASES = {        # (batch, query heads, kv heads, L, S, dq, dv), causal, mask
    "plain": ((2, 4, 4, 77, 77, 64, 64), False, None),
    "causal": ((2, 4, 4, 77, 77, 64, 64), True, None),
    "causal-wide": ((1, 2, 2, 50, 130, 32, 32), True, None),
    "causal-tall": ((1, 2, 2, 130, 50, 32, 32), True, None),
    "bool": ((2, 4, 4, 77, 90, 64, 64), False, "bool"),
    "additive": ((2, 4, 4, 77, 90, 64, 64), False, "additive"),
    "additive-full": ((2, 4, 4, 33, 40, 128, 128), False, "additive-full"),
    "gqa": ((2, 8, 2, 65, 65, 64, 64), True, None),
    "dims": ((1, 3, 3, 45, 70, 40, 24), False, "bool"),
}


@pytest.mark.parametrize("dt", [ember.float16, ember.float32, ember.float64], ids=str)
@pytest.mark.parametrize("case", list(ATTENTION_CASES))
def test_attention_kernels_equal_the_cpu(request, monkeypatch, kernels, case, dt):
    """Forward and backward by the CUDA kernels against torch's cpu attention in float64 on
    the same (rounded) inputs (on a GPU, ember's cpu attention: torch may be missing there)."""
    if kernels == "emulated" and case not in ATTENTION_SMALL:
        pytest.skip("the emulator runs small sizes")
    if kernels == "emulated" and dt == ember.float64 and not request.config.getoption(
            "--runslow"):
        pytest.skip("slow: run with --runslow (float16 and float32 run by default)")
    cases = ATTENTION_SMALL if kernels == "emulated" else ATTENTION_CASES
    (b, h, hkv, L, S, dq, dv), causal, mask_kind = cases[case]
    rng = np.random.default_rng(0)

    def rounded(*shape):
        return rng.standard_normal(shape).astype(dt.np).astype(np.float64)
    q, k, v = rounded(b, h, L, dq), rounded(b, hkv, S, dq), rounded(b, hkv, S, dv)
    mask = None if mask_kind is None else dict(_masks(rng, (b, h), L, S))[mask_kind]
    if mask is not None and mask.dtype != np.bool_:
        mask = mask.astype(dt.np).astype(np.float64)
    g, want = _torch_sdpa(q, k, v, mask, causal, h != hkv, None if kernels == "emulated"
                          else ember)
    ran = _count_launches(monkeypatch, KA, "forward", "backward")
    ts = [ember.tensor(a, dtype=dt, device="cuda", requires_grad=True) for a in (q, k, v)]
    m = None if mask is None else ember.tensor(mask, device="cuda", dtype=ember.bool if
                                               mask.dtype == np.bool_ else dt)
    out = F.scaled_dot_product_attention(*ts, attn_mask=m, is_causal=causal,
                                         enable_gqa=h != hkv)
    out.backward(ember.tensor(g, dtype=dt, device="cuda"))
    assert ran == ["forward", "backward"]
    tol = {ember.float16: 2e-2, ember.float32: 2e-5, ember.float64: 1e-11}[dt]
    for got, w, name in zip([out] + [t.grad for t in ts], want, ("out", "dq", "dk", "dv")):
        assert got.dtype == dt
        np.testing.assert_allclose(got.detach().cpu().double().numpy(), w, rtol=tol, atol=tol,
                                   err_msg=name)


@pytest.mark.cuda
def test_attention_kernels_keep_memory_linear_and_double_backward_takes_the_ops():
    L = 8192
    q = ember.randn(1, 4, L, 64, device="cuda", dtype=ember.float16, requires_grad=True)
    ember.cuda.synchronize()
    base = ember.cuda.memory_allocated()
    ember.cuda.reset_peak_memory_stats()
    F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    ember.cuda.synchronize()
    scores = 4 * L * L * 2          # the float16 score matrices of the 4 heads: 512 MiB
    # (linear: q, out, lse, the gradients and their float32 temporaries, some 50 MiB)
    assert ember.cuda.max_memory_allocated() - base < scores / 4
    x = ember.randn(2, 40, 16, device="cuda", dtype=ember.float64, requires_grad=True)
    (gx,) = ember.autograd.grad(F.scaled_dot_product_attention(x, x, x).square().sum(), x,
                                create_graph=True)
    gx.sum().backward()
    xc = x.detach().cpu().requires_grad_()
    (gc,) = ember.autograd.grad(F.scaled_dot_product_attention(xc, xc, xc).square().sum(), xc,
                                create_graph=True)
    gc.sum().backward()
    np.testing.assert_allclose(x.grad.cpu().numpy(), xc.grad.numpy(), rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("dt", [ember.float32, ember.float64], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_kernel_equals_the_xp_code(monkeypatch, kernels, dt, reduction,
                                                 smoothing):
    ember.manual_seed(0)
    n, c = (30, 700) if kernels == "emulated" else (300, 1000)
    x0 = ember.randn(n, c, dtype=dt) * 3
    t0 = ember.randint(0, c, (n,))
    t0[::7] = -100
    ran = _count_launches(monkeypatch, K, "cross_entropy", "cross_entropy_backward")

    def run(dev="cuda"):
        x = x0.to(dev).requires_grad_()
        loss = F.cross_entropy(x, t0.to(dev), reduction=reduction, label_smoothing=smoothing)
        (gx,) = ember.autograd.grad(loss, x, ember.ones_like(loss))
        return loss, gx
    fused, ref = _both(run, monkeypatch)
    assert ran == ["cross_entropy", "cross_entropy_backward"]
    _close(fused, ref, dt)
    _close(fused, [r.detach().double().numpy() for r in run("cpu")], dt)


@pytest.mark.filterwarnings("ignore:invalid value encountered")    # (the double's 0 / 0)
def test_cross_entropy_kernel_all_ignored_and_out_of_range(kernels):
    x = ember.randn(4, 5, device="cuda", requires_grad=True)
    loss = F.cross_entropy(x, ember.full((4,), -100, device="cuda"), label_smoothing=0.2)
    loss.backward()
    assert loss.isnan().item() and (x.grad == 0).all().item()
    with pytest.raises(IndexError, match="out of bounds"):
        F.cross_entropy(x, ember.tensor([0, 1, 5, 2], device="cuda"))


@pytest.mark.parametrize("dt", [ember.float32, ember.float64], ids=str)
@pytest.mark.parametrize("padding_idx", [None, 3])
def test_embedding_backward_kernel_equals_the_xp_code(monkeypatch, kernels, dt, padding_idx):
    ember.manual_seed(0)
    w0 = ember.randn(50, 33, dtype=dt)
    idx = ember.randint(0, 50, (64, 17))
    idx[::3, ::2] = 3                       # repeated rows, and the padding row
    g = ember.randn(64, 17, 33, dtype=dt)
    ran = _count_launches(monkeypatch, K, "embedding_backward")

    def run(dev="cuda"):
        w = w0.to(dev).requires_grad_()
        F.embedding(idx.to(dev), w, padding_idx).backward(g.to(dev))
        return w.grad
    fused, ref = _both(run, monkeypatch)
    assert ran == ["embedding_backward"]
    _close(fused, ref, dt)
    _close(fused, [run("cpu").double().numpy()], dt)
    if padding_idx is not None:
        assert not fused[0][padding_idx].any()


# ---- ember.compile's generated CUDA kernels (ember/_graph/cgen.py, toolchain.py) ------------

def _compiled_graphs():
    """Functions whose captured graphs fuse into kernels of each kind: elementwise chains with
    broadcast operands and bool results (flat kernels: a thread per element), row reductions
    (a block per row: softmax, layer_norm, amax with NaN), and the backward's kernels."""
    F = ember.nn.functional
    return {
        "pointwise": lambda x, w, b: ((F.gelu(x * w + b) - F.silu(x)).tanh() * (x > 0)).sum(),
        "rows": lambda x, w, b: (F.softmax(x * 2, -1) + F.layer_norm(x, (x.shape[-1],), w, b)
                                 ).sum() + F.log_softmax(x, -1).amax(-1).sum(),
        "mean-var": lambda x, w, b: (x.var(-1) + x.mean(-1) * F.rms_norm(x, (x.shape[-1],), w)
                                     .sum(-1)).sum(),
    }


@pytest.mark.parametrize("dt", [ember.float32, ember.float64], ids=str)
@pytest.mark.filterwarnings("ignore:var\\(\\)")
@pytest.mark.parametrize("shape", [(3, 1), (2, 3, 37), (2, 300)], ids=str)
@pytest.mark.parametrize("name", list(_compiled_graphs()))
def test_compiled_cuda_kernels_equal_the_cpu(monkeypatch, tmp_path, kernels, name, shape, dt):
    from ember._graph import toolchain
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    made = []
    monkeypatch.setattr(toolchain._Libraries, "kernel", lambda self, n, _k=toolchain._Libraries.kernel:
                        made.append(n) or _k(self, n))
    fn = _compiled_graphs()[name]
    ember.manual_seed(0)
    x0 = ember.randn(*shape, dtype=dt)
    x0[..., 0] = float("nan") if name == "rows" and shape[-1] > 1 else x0[..., 0]
    w0, b0 = ember.randn(shape[-1], dtype=dt), ember.randn(shape[-1], dtype=dt)

    def run(f, dev):
        xs = [t.to(dev).requires_grad_() for t in (x0, w0, b0)]
        y = f(*xs)
        return [y] + list(ember.autograd.grad(y, xs, allow_unused=True, materialize_grads=True))
    ref, got = run(fn, "cpu"), run(ember.compile(fn), "cuda")
    assert made and all(g.device.type == "cuda" for g in got)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g.detach().cpu().numpy(), r.detach().numpy(),
                                   **({"rtol": 2e-4, "atol": 2e-5} if dt == ember.float32 else
                                      {"rtol": 1e-10, "atol": 1e-12}), equal_nan=True)


def test_compiled_cuda_kernels_follow_a_dynamic_size(monkeypatch, tmp_path, kernels):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    F = ember.nn.functional
    from ember._graph import toolchain
    made = []
    monkeypatch.setattr(toolchain._Libraries, "kernel", lambda self, n, _k=toolchain._Libraries.kernel:
                        made.append(self.cuda_source) or _k(self, n))
    fns = [lambda x: F.softmax(x, -1) * x.sigmoid(), lambda x: (x * 2).sigmoid() + x.exp()]
    for fn in fns:      # (rows in blocks; then elements in threads: no row reduction)
        f = ember.compile(fn, dynamic=True)
        for rows, n in [(2, 5), (3, 70), (1, 9)]:
            x = ember.randn(rows, n, dtype=ember.float64)
            np.testing.assert_allclose(f(x.cuda()).cpu().numpy(), fn(x).numpy(), rtol=1e-12)
    assert any("_s0" in src and "gridDim" in src for src in made)


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_compiled_module_trains_on_cuda_as_on_the_cpu(monkeypatch, tmp_path, kernels, mode):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    nn = ember.nn
    ember.manual_seed(0)
    models = [nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))
              .double() for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    models[1] = ember.compile(models[1].cuda(), mode=mode)
    opts = [ember.optim.SGD(m.parameters(), lr=0.1) for m in models]
    for _ in range(3):
        x = ember.randn(8, 16, dtype=ember.float64)
        losses = []
        for m, opt, dev in zip(models, opts, ("cpu", "cuda")):
            loss = m(x.to(dev)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss))
        assert losses[1] == pytest.approx(losses[0], rel=1e-12)


def test_compiled_cuda_sources_compile_with_nvrtc(monkeypatch, tmp_path):
    """Every kernel kind the tests above run, as NVRTC compiles it for sm_80: launchable at
    256 threads, nothing spilled."""
    from ember._graph import toolchain
    lib = _need_nvrtc()
    if not cuda_emulator.compiler():
        pytest.skip("no C++ compiler for the kernel emulator")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    sources = []
    monkeypatch.setattr(toolchain._Libraries, "kernel", lambda self, n, _k=toolchain._Libraries.kernel:
                        sources.append(self.cuda_source) or _k(self, n))
    with cuda_double() as cupy, cuda_emulator.emulated_kernels(cupy):
        for fn in _compiled_graphs().values():
            xs = [ember.randn(*s, device="cuda").requires_grad_() for s in ((2, 33), (33,), (33,))]
            ember.autograd.grad(ember.compile(fn)(*xs), xs, allow_unused=True)
    assert sources
    for src in dict.fromkeys(sources):
        rc, log = _compile(lib, src)
        assert rc == 0, log
        assert _launchable(log, 256) == 0, log


def test_compile_on_cuda_without_kernels_runs_eagerly(monkeypatch, tmp_path):
    """Where CuPy cannot compile kernels (the double without the emulator) or they are off,
    a compiled function on cuda tensors runs its ops eagerly: same results."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    with cuda_double():
        x = ember.randn(4, 8, device="cuda")
        f = ember.compile(lambda x: ember.nn.functional.softmax(x * 2, -1))
        np.testing.assert_allclose(f(x).cpu().numpy(),
                                   ember.nn.functional.softmax(x.cpu() * 2, -1).numpy(), rtol=1e-6)
