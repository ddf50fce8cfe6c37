"""The LSTM layer's C kernels (``lstm_fwd`` / ``lstm_bwd`` in ember/_C/kernels/lstm.h, reached from the
``_lstm_layer`` op) against its NumPy time loops: outputs, final states and every gradient,
float32 and float64, odd sizes (SIMD remainders), non-contiguous inputs, batch_first,
bidirectional, given initial states, gradients through h_n / c_n only, 1 and 2 threads; and
against torch in float32 at a size where the vector loops do most of the work."""
import numpy as np
import pytest

import ember
from ember._C import kernels
from ember._ops import recurrent

pytestmark = [
    pytest.mark.skipif(recurrent._layer_kernel("lstm_fwd", np, np.float32) is None,
                       reason="C kernels not built, EMBER_NO_C set, or no BLAS found"),
    pytest.mark.usefixtures("threads")]     # each test at 1 and 2 threads

TOL = {"float32": dict(rtol=2e-5, atol=2e-6), "float64": dict(rtol=1e-12, atol=1e-13)}


def _lstm(dtype, H, **kw):
    ember.manual_seed(0)
    return ember.nn.LSTM(5, H, **kw).to(getattr(ember, dtype))


def _run(model, x, states=None, loss="all"):
    """Outputs, final states, and the gradients of the input, the states and every weight."""
    model.zero_grad()
    xt = ember.tensor(x, requires_grad=True)
    st = [ember.tensor(s, requires_grad=True) for s in states] if states else None
    out, (h, c) = model(xt, tuple(st) if st else None)
    rng = np.random.default_rng(9)
    w = [ember.tensor(rng.standard_normal(tuple(t.shape)).astype(x.dtype)) for t in (out, h, c)]
    if loss == "all":
        total = (out * w[0]).sum() + (h * w[1]).sum() + (c * w[2]).sum()
    else:                                       # only the final states: no output gradient
        total = (h * w[1]).sum() + (c * w[2]).sum()
    total.backward()
    grads = [xt.grad] + ([s.grad for s in st] if st else []) + [
        p.grad for p in model.parameters()]
    return [t.detach().numpy() for t in [out, h, c] + grads]


def check(model, x, states=None, loss="all"):
    fast = _run(model, x, states, loss)
    with kernels.disabled():
        assert recurrent._layer_kernel("lstm_fwd", np, np.float32) is None
        ref = _run(model, x, states, loss)
    for k, (a, b) in enumerate(zip(fast, ref)):
        assert a.dtype == b.dtype and a.shape == b.shape, k
        np.testing.assert_allclose(a, b, err_msg=f"result {k}", **TOL[a.dtype.name])


def _input(shape, dtype, noncontig=False, seed=0):
    rng = np.random.default_rng(seed)
    if noncontig:
        return rng.standard_normal(tuple(reversed(shape))).astype(dtype).T
    return rng.standard_normal(shape).astype(dtype)


@pytest.fixture(params=[False, True], ids=["panels", "blas"])
def step_gemm(request):
    """The per-step product by the kernel's own panel loop (AVX-512) or by BLAS."""
    kernels.kernel("lstm_fwd", np.dtype(np.float32))        # (loads the library)
    kernels._lib.lstm_force_blas(int(request.param))
    yield
    kernels._lib.lstm_force_blas(0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("H", [1, 7, 19, 40])
def test_layer_matches_numpy(dtype, H, step_gemm):
    check(_lstm(dtype, H, num_layers=2), _input((6, 3, 5), dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_layer_many_rows_and_panels(dtype, step_gemm):
    """Batch past the 8-row blocks and hidden sizes past a few panels, with remainders; big
    enough that the panels are split over threads."""
    check(_lstm(dtype, 70), _input((3, 21, 5), dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kw", [dict(bidirectional=True), dict(batch_first=True),
                                dict(bias=False, bidirectional=True, num_layers=2)],
                         ids=["bidirectional", "batch_first", "nobias-bidir-2layers"])
def test_layer_variants(dtype, kw):
    check(_lstm(dtype, 19, **kw), _input((4, 5, 5), dtype, noncontig=True))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_initial_states_and_final_state_loss(dtype):
    model = _lstm(dtype, 17, num_layers=2, bidirectional=True)
    x = _input((5, 3, 5), dtype)
    states = [_input((4, 3, 17), dtype, noncontig=True, seed=s) for s in (1, 2)]
    check(model, x, states)
    check(model, x, states, loss="final")
    check(model, x[:1], states)                 # one step


def test_layer_op_reduced_precision_and_views():
    """bfloat16 and float16 run the float32 kernel; strided views are taken as they are."""
    rng = np.random.default_rng(3)
    T, B, H = 4, 3, 9
    xproj = rng.standard_normal((B, T, 4 * H)).astype(np.float32).transpose(1, 0, 2)
    h0, c0 = (rng.standard_normal((B, 2 * H)).astype(np.float32)[:, ::2] for _ in range(2))
    w = rng.standard_normal((H, 4 * H)).astype(np.float32).T
    b = rng.standard_normal(4 * H).astype(np.float32)
    for dtype in (ember.float32, ember.float16, ember.bfloat16):
        args = [ember.tensor(a).to(dtype) for a in (xproj, h0, c0, w, b)]
        for reverse in (False, True):
            fast = recurrent.lstm_layer(*args, reverse)
            with kernels.disabled():
                ref = recurrent.lstm_layer(*args, reverse)
            for a, r in zip(fast, ref):
                assert a.dtype == dtype
                np.testing.assert_allclose(a.float().numpy(), r.float().numpy(),
                                           rtol=1e-2 if dtype != ember.float32 else 2e-5,
                                           atol=1e-2 if dtype != ember.float32 else 2e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(3, 2), (2, 3, 7), (600, 67)])
def test_cell_matches_numpy(dtype, shape):
    # _lstm_cell and _lstm_cell_backward (lstm.h's lstm_cell): odd hidden sizes (SIMD
    # remainders), strided gates, nan and inf, rows enough for 2 threads
    rng = np.random.default_rng(0)
    ig, hg = (rng.standard_normal(shape[:-1] + (4 * shape[-1],)).astype(dtype) * 3
              for _ in range(2))
    cx, ghy, gcy = (rng.standard_normal(shape).astype(dtype) for _ in range(3))
    ig.flat[:3] = np.nan, np.inf, -np.inf
    hg = np.asfortranarray(hg)
    for op, args in ((recurrent.lstm_cell, (ig, hg, cx)),
                     (recurrent.lstm_cell_backward, (ghy, gcy, ig, hg, cx))):
        fast = op.fwd(np, *args)
        with kernels.disabled():
            ref = op.fwd(np, *args)
        for a, b in zip(fast, ref, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=TOL[dtype]["rtol"],
                                       atol=TOL[dtype]["atol"] * np.nanmax(np.abs(b)))


def test_against_torch_float32():
    from oracle import torch                    # (skips the test without torch)
    t = torch.nn.LSTM(24, 48, num_layers=2)
    e = ember.nn.LSTM(24, 48, num_layers=2)
    e.load_state_dict({k: ember.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    x = _input((12, 5, 24), "float32")
    xe, xt = ember.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    oe, ot = e(xe)[0], t(xt)[0]
    np.testing.assert_allclose(oe.detach().numpy(), ot.detach().numpy(), rtol=1e-4, atol=1e-5)
    oe.sin().sum().backward()
    ot.sin().sum().backward()
    np.testing.assert_allclose(xe.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    for (n, pe), (_, pt) in zip(e.named_parameters(), t.named_parameters()):
        np.testing.assert_allclose(pe.grad.numpy(), pt.grad.numpy(), rtol=1e-4, atol=1e-4,
                                   err_msg=n)
