"""torch's remaining dense names, each against torch 2.13: linalg.ldl_*, orgqr/ormqr,
hash_tensor, slice_inverse, grad_dtype, set_flush_denormal, the float8 dtypes, embedding_bag,
lobpcg, SyncBatchNorm, LinearCrossEntropyLoss, scaled_mm and grouped_mm."""
import numpy as np
import pytest
import torch

import ember


def _pair(a):
    return torch.tensor(a), ember.tensor(a)


def _matrix(rng, shape, complex_=False):
    a = rng.standard_normal(shape)
    return a + 1j * rng.standard_normal(shape) if complex_ else a


# ---- linalg.ldl_factor / ldl_solve --------------------------------------------------------------

@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("hermitian", [False, True])
def test_ldl_pivots_and_solutions_equal_torch(complex_, hermitian):
    rng = np.random.default_rng(int(complex_) * 2 + hermitian)
    for trial in range(40):
        n = int(rng.integers(1, 9))
        a = _matrix(rng, (n, n), complex_)
        if trial % 3 == 0:      # small diagonal entries: 2x2 pivots and interchanges
            a[np.diag_indices(n)] *= 0.01
        if trial % 7 == 0:      # a zero column: info > 0
            a[:, 0] = a[0, :] = 0
        t, e = _pair(a)
        ft = torch.linalg.ldl_factor_ex(t, hermitian=hermitian)
        fe = ember.linalg.ldl_factor_ex(e, hermitian=hermitian)
        assert fe.pivots.dtype is ember.int32
        np.testing.assert_array_equal(fe.pivots.numpy(), ft.pivots.numpy())
        assert int(fe.info) == int(ft.info)
        np.testing.assert_allclose(fe.LD.numpy(), ft.LD.numpy(), atol=1e-10)
        if int(ft.info) == 0:
            b = _matrix(rng, (n, 3), complex_)
            xt = torch.linalg.ldl_solve(ft.LD, ft.pivots, torch.tensor(b), hermitian=hermitian)
            xe = ember.linalg.ldl_solve(fe.LD, fe.pivots, ember.tensor(b), hermitian=hermitian)
            np.testing.assert_allclose(xe.numpy(), xt.numpy(), rtol=1e-8, atol=1e-8)


def test_ldl_batched_broadcast_and_errors():
    rng = np.random.default_rng(5)
    a, b = _matrix(rng, (2, 5, 5)), _matrix(rng, (3, 1, 5, 2))
    (ta, ea), (tb, eb) = _pair(a), _pair(b)
    LDt, pt = torch.linalg.ldl_factor(ta)
    LDe, pe = ember.linalg.ldl_factor(ea)
    np.testing.assert_array_equal(pe.numpy(), pt.numpy())
    # (torch 2.13 crashes broadcasting these batch shapes itself: it gets them expanded)
    xt = torch.linalg.ldl_solve(LDt.expand(3, 2, 5, 5), pt.expand(3, 2, 5), tb.expand(3, 2, 5, 2))
    xe = ember.linalg.ldl_solve(LDe, pe, eb)
    assert xe.shape == xt.shape == (3, 2, 5, 2)
    np.testing.assert_allclose(xe.numpy(), xt.numpy(), rtol=1e-9, atol=1e-9)
    with pytest.raises(RuntimeError, match="Unknown error code: 1"):
        ember.linalg.ldl_factor(ember.zeros(3, 3))
    with pytest.raises(NotImplementedError, match="derivative for 'linalg_ldl_factor_ex'"):
        ember.linalg.ldl_factor(ea.requires_grad_())[0].sum().backward()
    big = _matrix(rng, (100, 100))      # LAPACK's blocked path: the same pivots
    np.testing.assert_array_equal(ember.linalg.ldl_factor(ember.tensor(big)).pivots.numpy(),
                                  torch.linalg.ldl_factor(torch.tensor(big)).pivots.numpy())


# ---- orgqr / ormqr ------------------------------------------------------------------------------

@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("left,transpose", [(True, False), (True, True), (False, False),
                                            (False, True)])
def test_ormqr_values_gradients_and_nodes(complex_, left, transpose):
    rng = np.random.default_rng(int(left) * 2 + transpose)
    for shape, c_shape in [((5, 3), (5, 2) if left else (2, 5)), ((2, 4, 4), (2, 4, 3) if left
                                                                   else (2, 3, 4))]:
        a0, c0 = _matrix(rng, shape, complex_), _matrix(rng, c_shape, complex_)
        got = []
        for lib in (torch, ember):
            a, tau = lib.geqrf(lib.tensor(a0))
            a, tau, c = a.requires_grad_(), tau.requires_grad_(), lib.tensor(c0).requires_grad_()
            r = lib.ormqr(a, tau, c, left, transpose)
            r.abs().sum().backward()
            q = a.orgqr(tau)
            got.append([r.detach().numpy(), a.grad.numpy(), tau.grad.numpy(), c.grad.numpy(),
                        q.detach().numpy(), type(r.grad_fn).__name__, type(q.grad_fn).__name__])
        for x, y in zip(*got):
            if isinstance(x, str):
                assert x == y
            else:
                np.testing.assert_allclose(y, x, atol=1e-10)


@pytest.mark.parametrize("call", [
    lambda L, a, t: L.ormqr(a, t, L.ones(4, 2, dtype=L.float64)),
    lambda L, a, t: L.ormqr(a, t, L.ones(2, 4, dtype=L.float64), left=False),
    lambda L, a, t: L.ormqr(a, t, L.ones(5, 2)),
    lambda L, a, t: L.ormqr(a, t[:2], L.ones(5, 2, dtype=L.float64)),
    lambda L, a, t: L.ormqr(a, t, L.ones(5, dtype=L.float64)),
    lambda L, a, t: L.ormqr(a, t, L.ones(2, 5, 2, dtype=L.float64)),
    lambda L, a, t: L.orgqr(a.mT, t[:2]),
    lambda L, a, t: L.orgqr(a, L.ones(4, dtype=L.float64)),
    lambda L, a, t: L.orgqr(a, t.float()),
    lambda L, a, t: L.orgqr(a, t[None])])
def test_ormqr_orgqr_errors_as_torch(call):
    a0 = np.random.default_rng(0).standard_normal((5, 3))
    msgs = []
    for lib in (torch, ember):
        a, tau = lib.geqrf(lib.tensor(a0))
        with pytest.raises(RuntimeError) as info:
            call(lib, a, tau)
        msgs.append(str(info.value))
    assert msgs[1] == msgs[0]


def test_ormqr_batch_and_dtype_errors_as_torch():
    a0 = np.random.default_rng(0).standard_normal((2, 5, 3))
    for call in (lambda L, a, t: L.ormqr(a, t[:1], L.ones(2, 5, 2, dtype=L.float64)),
                 lambda L, a, t: L.ormqr(a, t, L.ones(3, 5, 2, dtype=L.float64)),
                 lambda L, a, t: L.ormqr(a, t.float(), L.ones(2, 5, 2, dtype=L.float64)),
                 lambda L, a, t: L.ormqr(a.int(), t.int(), L.ones(2, 5, 2, dtype=L.int32))):
        msgs = []
        for lib in (torch, ember):
            a, tau = lib.geqrf(lib.tensor(a0))
            with pytest.raises((RuntimeError, NotImplementedError)) as info:
                call(lib, a, tau)
            msgs.append((info.type, str(info.value)))
        assert msgs[1] == msgs[0]


# ---- hash_tensor, slice_inverse, name, grad_dtype, set_flush_denormal ---------------------------

def test_hash_tensor_bits():
    x = [float("nan"), -0.0, 1.5, -2.0, float("inf")]
    assert int(ember.hash_tensor(ember.tensor(x))) == int(torch.hash_tensor(torch.tensor(x)))
    for d in ("int8", "uint8", "bool", "float16", "bfloat16"):
        t = torch.tensor([[1, -3, 2], [0, 5, 1]]).to(getattr(torch, d))
        e = ember.tensor([[1, -3, 2], [0, 5, 1]]).to(getattr(ember, d))
        assert ember.hash_tensor(e, 1).tolist() == torch.hash_tensor(t, 1).tolist()
    assert ember.hash_tensor(ember.ones(2, requires_grad=True)).grad_fn is None


def test_slice_inverse_views_the_base_and_routes_gradients():
    for lib in (torch, ember):
        base = lib.arange(10.).reshape(5, 2)[1:]
        r = base[1:3].slice_inverse(base, 0, 1, 3)
        assert r.tolist() == base.tolist() and r.storage_offset() == 2
        assert r.data_ptr() == base.data_ptr()
    got = []
    for lib in (torch, ember):
        x = lib.ones(4, requires_grad=True)
        b = x * lib.arange(4.)
        r = lib.slice_inverse(b[1:3], b, 0, 1, 3)
        (r * lib.arange(1., 5.)).sum().backward()
        got.append((x.grad.tolist(), type(r.grad_fn).__name__))
    assert got[0] == got[1]


@pytest.mark.filterwarnings("ignore:The .grad attribute")
def test_name_and_grad_dtype():
    x = ember.ones(3)
    assert x.name is None and ember.arange(3).grad_dtype is ember.int64
    with pytest.raises(AttributeError):
        x.name = "w"
    grads = []
    for lib in (torch, ember):
        x = lib.ones(3, requires_grad=True)
        x.grad_dtype = lib.float64
        (x * 0.1).sum().backward()
        (x * 0.7).sum().backward()
        grads.append((str(x.grad.dtype), x.grad.tolist(), str(x.grad_dtype)))
        with pytest.raises(RuntimeError, match="grad_dtype can only be accessed on leaf"):
            (x * 2).grad_dtype
        with pytest.raises(RuntimeError, match="grad_dtype can only be set on leaf"):
            (x * 2).grad_dtype = None
    assert grads[0] == grads[1]


def test_set_flush_denormal_and_flags():
    import platform
    expected = platform.machine() in ("x86_64", "AMD64")
    try:
        assert ember.set_flush_denormal(True) is expected
        if expected:
            assert float(ember.tensor([1e-40]) * 1.0) == 0.0
            assert float(ember.tensor([1e-320], dtype=ember.float64) * 1.0) == 0.0
    finally:
        assert ember.set_flush_denormal(False) is expected
    assert float(ember.tensor([1e-40]) * 1.0) > 0
    assert ember.profiler_allow_cudagraph_cupti_lazy_reinit_cuda12() is \
        torch.profiler_allow_cudagraph_cupti_lazy_reinit_cuda12()
    assert ember.fft.Tensor is ember.Tensor


# ---- float8_e4m3fnuz, float8_e5m2fnuz, float8_e8m0fnu ----------------------------------------

F8 = ["float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"]


@pytest.mark.parametrize("name", F8)
def test_float8_conversions_bit_for_bit(name):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(3000) * np.exp(rng.uniform(-100, 100, 3000)),
                        [0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3e38, 1.5, 3, 0.75, 2 ** -127,
                         2 ** -128, 1.5 * 2 ** -126, 1000, 240, 57344, 61440]])
    td, ed = getattr(torch, name), getattr(ember, name)
    for src in (np.float64, np.float32, np.float16):
        with np.errstate(over="ignore"):
            a = x.astype(src)
        t, e = torch.tensor(a).to(td), ember.tensor(a).to(ed)
        np.testing.assert_array_equal(e.view(ember.uint8).numpy(), t.view(torch.uint8).numpy())
    every = np.arange(256, dtype=np.uint8)
    back_t = torch.tensor(every).view(td).double().numpy()
    back_e = ember.tensor(every).view(ed).double().numpy()
    np.testing.assert_array_equal(back_e, back_t)
    for make in (lambda L, d: L.zeros(3, dtype=d), lambda L, d: L.full((2,), 3.0, dtype=d),
                 lambda L, d: L.cat([L.ones(2, dtype=d), L.zeros(1, dtype=d)])):
        assert make(ember, ed).view(ember.uint8).tolist() == \
            make(torch, td).view(torch.uint8).tolist()
    assert (ed.is_signed, ed.itemsize, ed.is_floating_point, repr(ed)) == \
        (td.is_signed, td.itemsize, td.is_floating_point, repr(td))
    assert str(ember.finfo(ed)) == str(torch.finfo(td))
    with pytest.raises(RuntimeError, match="Promotion for Float8 Types is not supported"):
        ember.promote_types(ed, ember.float32)
    assert repr(ember.tensor([1.5, 0.25, 8.0]).to(ed)) == repr(torch.tensor([1.5, 0.25, 8.0]).to(td))


# ---- nn.LinearCrossEntropyLoss -------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:linear_cross_entropy")
def test_linear_cross_entropy_loss_module():
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((120, 5)), rng.standard_normal(120)
    x, y = rng.standard_normal((2, 5)), rng.integers(0, 10, (2, 4, 3))
    out = []
    for lib in (torch, ember):
        m = lib.nn.LinearCrossEntropyLoss(5, 10, out_features=(4, 3), bias=True,
                                          dtype=lib.float64, label_smoothing=0.1,
                                          options=lib.nn.LinearCrossEntropyOptions())
        m.linear.weight.data.copy_(lib.tensor(w))
        m.linear.bias.data.copy_(lib.tensor(b))
        loss = m(lib.tensor(x), lib.tensor(y))
        loss.backward()
        out.append((loss.item(), m.linear.weight.grad.numpy(), repr(m), repr(m.options)))
    np.testing.assert_allclose(out[1][0], out[0][0], rtol=1e-12)
    np.testing.assert_allclose(out[1][1], out[0][1], atol=1e-12)
    assert out[1][2:] == out[0][2:]
    for lib in (torch, ember):
        o = lib.nn.LinearCrossEntropyOptions(chunking_method="aspect_ratio:4")
        assert o._compute_batch_chunk_size(4096, 512, 32000) == 32
        for bad in (dict(acc_policy="fast"), dict(chunking_method="rows"),
                    dict(batch_chunk_size=0), dict(acc_dtype=lib.int32)):
            with pytest.raises(ValueError):
                lib.nn.LinearCrossEntropyOptions(**bad)
        with pytest.raises(RuntimeError, match="expected weight shape to be"):
            lib.nn.LinearCrossEntropyLoss(5, 10, weight=lib.ones(3))


# ---- lobpcg ------------------------------------------------------------------------------------

def _spd(rng, m, batch=()):
    q = np.linalg.qr(rng.standard_normal(batch + (m, m)))[0]
    ev = rng.uniform(1, 10, batch + (m,))
    a = (q * ev[..., None, :]) @ np.swapaxes(q, -1, -2)
    return (a + np.swapaxes(a, -1, -2)) / 2, ev


@pytest.mark.parametrize("method", ["ortho", "basic"])
@pytest.mark.parametrize("largest", [True, False])
def test_lobpcg_eigenpairs_equal_torch(method, largest):
    rng = np.random.default_rng(int(largest) + 2 * (method == "basic"))
    for trial in range(4):
        m, k = int(rng.integers(12, 40)), int(rng.integers(1, 4))
        a, ev = _spd(rng, m)
        x = rng.standard_normal((m, k + trial % 2))
        b = None
        if trial == 3:      # a generalized problem
            c = rng.standard_normal((m, m))
            b = c @ c.T / m + np.eye(m)
        out = []
        for lib in (torch, ember):
            out.append(lib.lobpcg(lib.tensor(a), k=k, B=None if b is None else lib.tensor(b),
                                  X=lib.tensor(x), largest=largest, method=method))
        (Et, Xt), (Ee, Xe) = out
        np.testing.assert_allclose(Ee.numpy(), Et.numpy(), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(np.abs(Xe.numpy()), np.abs(Xt.numpy()), atol=1e-6)
        if b is None and method == "ortho":     # (basic may settle on a repeated pair, as torch)
            want = np.sort(ev)[::-1][:k] if largest else np.sort(ev)[:k]
            np.testing.assert_allclose(Ee.numpy(), want, rtol=1e-10)


def test_lobpcg_batched_gradient_and_errors():
    rng = np.random.default_rng(7)
    a, ev = _spd(rng, 15, (2,))
    x = rng.standard_normal((2, 15, 2))
    E, X = ember.lobpcg(ember.tensor(a), X=ember.tensor(x))
    assert E.shape == (2, 2) and X.shape == (2, 15, 2)
    np.testing.assert_allclose(E.numpy(), np.sort(ev, -1)[:, ::-1][:, :2], rtol=1e-10)
    E, X = ember.lobpcg(ember.tensor(a[0]), k=2)        # a random start
    np.testing.assert_allclose(E.numpy(), np.sort(ev[0])[::-1][:2], rtol=1e-8)
    grads, w_np = [], np.random.default_rng(8).standard_normal((15, 2))
    for lib in (torch, ember):
        A = lib.tensor(a[0]).requires_grad_()
        E, U = lib.lobpcg(A, X=lib.tensor(x[0]))
        w = lib.tensor(w_np)
        ((E * lib.tensor([1.0, 3.0], dtype=lib.float64)).sum() +
         (U * U[:1].sign() * w).sum()).backward()      # (eigenvectors' signs made torch's)
        grads.append(A.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], atol=1e-8)
    for lib in (torch, ember):
        A, B = lib.tensor(a[0]).requires_grad_(), lib.eye(15, dtype=lib.float64)
        with pytest.raises(ValueError, match="does not support backward with B != I"):
            lib.lobpcg(A, B=B, X=lib.tensor(x[0]))[0].sum().backward()
        with pytest.raises(ValueError, match="LOBPCG algorithm is not applicable"):
            lib.lobpcg(lib.eye(5, dtype=lib.float64), k=2)


# ---- nn.SyncBatchNorm ----------------------------------------------------------------------------

def _bn_data():
    rng = np.random.default_rng(3)
    return rng.standard_normal((6, 3, 4)) * 2 + 1, rng.standard_normal((6, 3, 4))


def _sync_bn_rank(rank, n, init_method):
    import ember.distributed as dist
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=n)
    x, g = _bn_data()
    rows = slice(rank * 3, rank * 3 + 3) if n == 2 else slice(None)
    model = ember.nn.Sequential(ember.nn.BatchNorm1d(3, momentum=0.3, dtype=ember.float64))
    model = ember.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    bn = model[0]
    with ember.no_grad():
        bn.weight.copy_(ember.tensor([1.0, 2.0, -0.5]))
        bn.bias.copy_(ember.tensor([0.1, 0.0, 0.3]))
    xi = ember.tensor(x[rows]).requires_grad_()
    for _ in range(2):
        y = model(xi)
    (y * ember.tensor(g[rows])).sum().backward()
    ref_bn = torch.nn.BatchNorm1d(3, momentum=0.3, dtype=torch.float64)
    with torch.no_grad():
        ref_bn.weight.copy_(torch.tensor([1.0, 2.0, -0.5]))
        ref_bn.bias.copy_(torch.tensor([0.1, 0.0, 0.3]))
    xt = torch.tensor(x).requires_grad_()
    for _ in range(2):
        yt = ref_bn(xt)
    (yt * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy()[rows], atol=1e-12)
    np.testing.assert_allclose(xi.grad.numpy(), xt.grad.numpy()[rows], atol=1e-12)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        np.testing.assert_allclose(getattr(bn, name).numpy(), getattr(ref_bn, name).numpy(),
                                   atol=1e-12)
    gw = bn.weight.grad.clone()     # (each rank's share: their sum is the whole batch's)
    dist.all_reduce(gw)
    np.testing.assert_allclose(gw.numpy(), ref_bn.weight.grad.numpy(), atol=1e-12)
    assert type(bn).__name__ == "SyncBatchNorm" and bn.num_batches_tracked.item() == 2
    dist.destroy_process_group()


def test_sync_batch_norm_single_process_is_batch_norm():
    x, _ = _bn_data()
    out = []
    for lib in (torch, ember):
        bn = lib.nn.SyncBatchNorm(3, dtype=lib.float64)
        y = bn(lib.tensor(x))
        bn.eval()
        out.append((y.detach().numpy(), bn(lib.tensor(x)).detach().numpy(),
                    bn.running_var.numpy(), repr(bn)))
        with pytest.raises(ValueError, match="expected at least 2D input"):
            bn(lib.ones(3, dtype=lib.float64))
        with pytest.raises(ValueError, match="number of input channels should be non-zero"):
            lib.nn.SyncBatchNorm(0)(lib.ones(2, 0))
    for a, b in zip(*out):
        assert a == b if isinstance(a, str) else np.allclose(a, b, atol=1e-12)


@pytest.mark.skipif(not pytest.importorskip("mpi4py"), reason="needs mpi4py")
def test_sync_batch_norm_two_ranks_equal_batch_norm_on_the_whole_batch():
    import socket

    import ember.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_sync_bn_rank, args=(2, f"tcp://127.0.0.1:{port}"), nprocs=2)


# ---- F.scaled_mm, F.grouped_mm, F.scaled_grouped_mm (torch 2.13 on the CPU) -------------------

def _mm_cases(L):
    F, g = L.nn.functional, np.random.default_rng(0)
    S, f8, bf = F.ScalingType, L.float8_e4m3fn, L.bfloat16

    def R(*s, dtype=None):
        t = L.tensor(g.standard_normal(s).astype(np.float32))
        return t if dtype is None else t.to(dtype)
    a, b, one = R(16, 32).to(f8), R(32, 16).to(f8), L.tensor(1.0)
    i32 = lambda v: L.tensor(v, dtype=L.int32)  # noqa: E731
    return {
        "tensorwise": lambda: F.scaled_mm(a, b, one, S.TensorWise, one, S.TensorWise),
        "tensorwise f32": lambda: F.scaled_mm(a, b, L.tensor(2.), S.TensorWise, L.tensor(.25),
                                              S.TensorWise, output_dtype=L.float32),
        "rowwise": lambda: F.scaled_mm(a, b, L.arange(16.).reshape(16, 1) / 8 + .5, S.RowWise,
                                       L.arange(16.).reshape(1, 16) / 8 + .5, S.RowWise,
                                       output_dtype=L.float32),
        "bf16 operand": lambda: F.scaled_mm(a.to(bf), b, one, S.TensorWise, one, S.TensorWise),
        "half scale": lambda: F.scaled_mm(a, b, one.half(), S.TensorWise, one, S.TensorWise),
        "mixed recipes": lambda: F.scaled_mm(a, b, one, S.TensorWise, L.ones(1, 16), S.RowWise),
        "blockwise": lambda: F.scaled_mm(a, b, L.ones(16, 1), S.BlockWise1x32, L.ones(1, 16),
                                         S.BlockWise1x32),
        "out None": lambda: F.scaled_mm(a, b, one, S.TensorWise, one, S.TensorWise,
                                        output_dtype=None),
        "out f16": lambda: F.scaled_mm(a, b, one, S.TensorWise, one, S.TensorWise,
                                       output_dtype=L.float16),
        "bias": lambda: F.scaled_mm(a, b, one, S.TensorWise, one, S.TensorWise,
                                    bias=L.ones(16), output_dtype=L.float32),
        "bias 2d": lambda: F.scaled_mm(a, b, one, S.TensorWise, one, S.TensorWise,
                                       bias=L.ones(16, 16, dtype=bf)),
        "3d": lambda: F.scaled_mm(a[None], b, one, S.TensorWise, one, S.TensorWise),
        "shapes": lambda: F.scaled_mm(a, b[:16], one, S.TensorWise, one, S.TensorWise),
        "e5m2, lists, swizzle": lambda: F.scaled_mm(
            a.to(L.float8_e5m2), b, [one], [S.TensorWise], [one], [S.TensorWise],
            swizzle_a=F.SwizzleType.SWIZZLE_32_4_4, output_dtype=L.float32),
        "g 3d": lambda: F.grouped_mm(R(2, 4, 8, dtype=bf), R(2, 8, 8, dtype=bf)),
        "g 3d b.mT": lambda: F.grouped_mm(R(2, 4, 8, dtype=bf),
                                          R(2, 8, 8, dtype=bf).transpose(-2, -1)),
        "g 3d f32": lambda: F.grouped_mm(R(2, 4, 4), R(2, 4, 4)),
        "g 3d f16": lambda: F.grouped_mm(R(2, 4, 8, dtype=L.float16), R(2, 8, 8, dtype=L.float16)),
        "g f64": lambda: F.grouped_mm(R(2, 4, 8, dtype=L.float64), R(2, 8, 8, dtype=L.float64)),
        "g 2d 3d": lambda: F.grouped_mm(R(10, 8), R(3, 8, 4), offs=i32([2, 5, 9]))[:9],
        "g int64 offs": lambda: F.grouped_mm(R(10, 8, dtype=bf), R(3, 8, 8, dtype=bf),
                                             offs=L.tensor([2, 5, 9])),
        "g 2d 2d": lambda: F.grouped_mm(R(8, 16), R(16, 4), offs=i32([2, 5, 16])),
        "g 3d 2d": lambda: F.grouped_mm(R(3, 8, 4), R(4, 24), offs=i32([8, 16, 24])),
        "g out_dtype": lambda: F.grouped_mm(R(2, 4, 8, dtype=bf), R(2, 8, 8, dtype=bf),
                                            out_dtype=L.float32),
        "g bias": lambda: F.grouped_mm(R(2, 4, 8, dtype=bf), R(2, 8, 8, dtype=bf),
                                       bias=L.ones(8, dtype=bf)),
        "g groups": lambda: F.grouped_mm(R(2, 4, 8, dtype=bf), R(3, 8, 8, dtype=bf)),
        "g K": lambda: F.grouped_mm(R(2, 4, 8, dtype=bf), R(2, 16, 8, dtype=bf)),
        "g 3d offs": lambda: F.grouped_mm(R(2, 4, 8, dtype=bf), R(2, 8, 8, dtype=bf),
                                          offs=i32([1, 2])),
        "g no offs": lambda: F.grouped_mm(R(16, 8, dtype=bf), R(3, 8, 8, dtype=bf)),
        "g dtypes": lambda: F.grouped_mm(R(2, 4, 8, dtype=bf), R(2, 8, 8)),
        "g strides": lambda: F.grouped_mm(R(2, 4, 8, dtype=bf), R(2, 8, 3, dtype=bf)),
        "g 1d": lambda: F.grouped_mm(R(8), R(3, 8, 4)),
        "g int8": lambda: F.grouped_mm(L.ones(2, 4, 16, dtype=L.int8),
                                       L.ones(2, 16, 16, dtype=L.int8)),
        "g offs count": lambda: F.grouped_mm(R(10, 8, dtype=bf), R(3, 8, 8, dtype=bf),
                                             offs=i32([2, 5])),
        "scaled grouped": lambda: F.scaled_grouped_mm(R(2, 16, 32).to(f8), R(2, 32, 16).to(f8),
                                                      L.ones(2, 16), S.RowWise, L.ones(2, 16),
                                                      S.RowWise)}


@pytest.mark.parametrize("case", list(_mm_cases(ember)))
def test_scaled_and_grouped_mm_as_torch_on_cpu(case):
    got = []
    for lib in (torch, ember):
        try:
            r = _mm_cases(lib)[case]()
            got.append((str(r.dtype), r.float().numpy()))
        except Exception as e:      # noqa: BLE001 (the same error is the expectation)
            got.append((type(e).__name__, str(e)))
    (kt, vt), (ke, ve) = got
    assert ke == kt
    if isinstance(vt, str):
        assert ve == vt or case == "scaled grouped" and vt.startswith(ve)
    else:       # (float32 GEMMs sum in another order; float8 inputs times float scales)
        np.testing.assert_allclose(ve, vt, rtol=1e-5, atol=1e-5)


def test_grouped_mm_gradients_and_enums():
    rng = np.random.default_rng(1)
    a0, b0, offs = rng.standard_normal((10, 8)), rng.standard_normal((3, 8, 4)), [2, 5, 10]
    grads = []
    for lib in (torch, ember):
        a = lib.tensor(a0, dtype=lib.float32).requires_grad_()
        b = lib.tensor(b0, dtype=lib.float32).requires_grad_()
        out = lib.nn.functional.grouped_mm(a, b, offs=lib.tensor(offs, dtype=lib.int32))
        (out * out).sum().backward()
        grads.append((type(out.grad_fn).__name__, a.grad.numpy(), b.grad.numpy()))
    assert grads[1][0] == grads[0][0]
    for x, y in zip(grads[0][1:], grads[1][1:]):
        np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-5)
    F, tF = ember.nn.functional, torch.nn.functional
    for E, T in ((F.ScalingType, tF.ScalingType), (F.SwizzleType, tF.SwizzleType)):
        assert {k: int(v) for k, v in E.__members__.items()} == \
            {k: int(v) for k, v in T.__members__.items()}
        assert repr(list(E)[1]) == repr(list(T.__members__.values())[1])


# ---- torch.embedding_bag (aten's, with its bookkeeping outputs) ----------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", [0, 1, 2])
def test_embedding_bag_four_outputs(dtype, mode):
    w0 = np.random.default_rng(0).standard_normal((6, 3))
    psw = np.random.default_rng(1).standard_normal(6)
    idx = [0, 2, 1, 4, 5, 5]
    for kw in (dict(), dict(include_last_offset=True), dict(padding_idx=5),
               dict(per_sample_weights=True), dict(scale_grad_by_freq=True),
               dict(padding_idx=0, include_last_offset=True)):
        if kw.get("per_sample_weights") and mode:
            continue
        off = [0, 2, 2, 6] if kw.get("include_last_offset") else [0, 2, 2, 5]
        got = []
        for L in (torch, ember):
            d = getattr(L, dtype)
            w = L.tensor(w0, dtype=d).requires_grad_()
            r = L.embedding_bag(w, L.tensor(idx), L.tensor(off), kw.get("scale_grad_by_freq", False),
                                mode, False, L.tensor(psw, dtype=d) if "per_sample_weights" in kw
                                else None, kw.get("include_last_offset", False),
                                kw.get("padding_idx"))
            (r[0] * L.arange(r[0].numel(), dtype=d).reshape(r[0].shape)).sum().backward()
            got.append([r[0].detach().numpy(), *(t.numpy() for t in r[1:]), w.grad.numpy(),
                        type(r[0].grad_fn).__name__, [str(t.dtype) for t in r]])
        for x, y in zip(*got):
            if isinstance(x, np.ndarray):
                assert x.shape == y.shape, kw
                np.testing.assert_allclose(y, x, rtol=1e-6, atol=1e-6)
            else:
                assert x == y, kw
    for L in (torch, ember):
        w = L.ones(3, 2)
        with pytest.raises(RuntimeError, match="`mode` must be sum, mean, or max"):
            L.embedding_bag(w, L.tensor([0, 1]), L.tensor([0]), False, 3)
        with pytest.raises(RuntimeError, match="offsets\\[0\\] has to be 0"):
            L.embedding_bag(w, L.tensor([0, 1]), L.tensor([1]))
        with pytest.raises(RuntimeError, match="offsets\\[-1\\] can not be greater than input"):
            L.embedding_bag(w, L.tensor([[0, 2], [1, 1]]), L.tensor([0, 5]))
    flat = [L.embedding_bag(L.arange(12.).reshape(6, 2), L.tensor([[0, 2], [1, 4]]),
                            L.tensor([0, 1]))[0].tolist() for L in (torch, ember)]
    assert flat[0] == flat[1]


# ---- float4_e2m1fn_x2: torch's storage-only dtype ----------------------------------------------

@pytest.mark.parametrize("expr", [
    "L.zeros(3, dtype=D)", "u.view(D)", "u.view(D).view(L.uint8)", "L.zeros(2, 2, dtype=D)[0]",
    "L.zeros(2, 2, dtype=D).t().contiguous()", "L.zeros(2, 2, dtype=D).reshape(4)",
    "L.cat([u.view(D)] * 2)", "L.stack([u.view(D)] * 2)", "u.view(D).clone()",
    "L.empty(2, dtype=D).element_size()", "(D.itemsize, D.is_floating_point, D.is_signed)",
    "u.view(D) == L.tensor([1, 5, 255], dtype=L.uint8).view(D)", "u.view(D) != u.view(D)",
    "L.zeros(3, dtype=D).copy_(u.view(D))", "u.view(D).new_zeros(3)"])
def test_float4_e2m1fn_x2_moves_and_compares_bytes(expr):
    got = []
    for L in (torch, ember):
        D, u = L.float4_e2m1fn_x2, L.tensor([1, 2, 255], dtype=L.uint8)
        got.append(repr(eval(expr)))
    assert got[1] == got[0]


@pytest.mark.parametrize("expr", ["L.ones(2, dtype=D)", "L.full((2,), 0.0, dtype=D)",
                                  "L.ones(2).to(D)", "L.zeros(2, dtype=D).float()",
                                  "L.zeros(2, dtype=D) + L.zeros(2, dtype=D)",
                                  "L.zeros(2, dtype=D).sum()", "L.zeros(2, dtype=D).abs()"])
def test_float4_e2m1fn_x2_converts_and_computes_nothing(expr):
    for L in (torch, ember):
        D = L.float4_e2m1fn_x2
        with pytest.raises(NotImplementedError, match="not implemented for 'Float4_e2m1fn_x2'"):
            eval(expr)
