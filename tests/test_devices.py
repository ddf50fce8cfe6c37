"""Devices: parsing and printing like torch.device, the meta device, and cuda (GPU only)."""
import numpy as np
import pytest

import ember
from helpers import skip_if_cupy
from oracle import torch


@pytest.mark.parametrize("spec", ["cpu", "cuda", "cuda:0", "cuda:3", "meta"])
def test_device_parsing_matches_torch(spec):
    e, t = ember.device(spec), torch.device(spec)
    assert (e.type, e.index, str(e), repr(e)) == (t.type, t.index, str(t), repr(t))


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", "cpu:0:1"])
def test_bad_device_string_raises_runtime_error(bad):
    with pytest.raises(RuntimeError):
        torch.device(bad)
    with pytest.raises(RuntimeError):
        ember.device(bad)


def test_device_equality_and_hash():
    assert ember.device("cuda:0") == ember.device("cuda", 0) == "cuda:0"
    assert len({ember.device("cpu"), ember.device("cpu")}) == 1
    assert ember.device("cpu") != ember.device("meta")


def test_meta_creation_and_ops_track_shape_and_dtype_only():
    a = ember.zeros(1000, 1000, 1000, device="meta")          # 4 GB if it had data
    b = ember.ones(1000, 1, dtype=ember.float64, device="meta")
    c = (a * b).sum(0)
    assert c.device.type == "meta" and tuple(c.shape) == (1000, 1000)
    assert c.dtype is ember.float64
    assert repr(ember.empty(2, 3, device="meta")) == "tensor(..., device='meta', size=(2, 3))"
    with pytest.raises(NotImplementedError, match="meta"):
        c.cpu()
    # joining has meta rules: no forward on the stride-0 arrays (stack's would fill 8 GB)
    assert tuple(ember.stack([a, a], 1).shape) == (1000, 2, 1000, 1000)
    assert tuple(ember.cat([a, a], 2).shape) == (1000, 1000, 2000)


def test_meta_autograd_records_a_graph():
    w = ember.randn(4, 3).to("meta").requires_grad_()
    y = (w @ ember.ones(3, 2, device="meta")).tanh().sum()
    y.backward()
    assert w.grad.device.type == "meta" and tuple(w.grad.shape) == (4, 3)


def test_moving_a_tensor_that_requires_grad_records_the_move():
    # (Tensor._move reaches ember._ops.dispatch, the module: once shadowed by the function)
    x = ember.ones(2, requires_grad=True)
    y = x.to("meta")
    assert y.grad_fn.name() == "ToCopyBackward0" and y.requires_grad


def test_mixing_devices_names_the_op_and_both_devices():
    with pytest.raises(RuntimeError, match=r"add.*cpu.*meta|add.*meta.*cpu"):
        ember.ones(2) + ember.ones(2, device="meta")


def test_zero_dim_cpu_tensor_joins_other_device_as_scalar():
    r = ember.ones(3, device="meta") * ember.tensor(2.0)
    assert r.device.type == "meta"


def test_cuda_without_cupy_or_gpu_raises_clearly():
    skip_if_cupy()
    with pytest.raises(RuntimeError, match="CuPy"):
        ember.ones(2).cuda()


@pytest.mark.cuda
def test_cuda_ops_match_cpu():
    x = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    a = ember.tensor(x, requires_grad=True)
    g = a.detach().cuda().requires_grad_()
    assert g.device == ember.device("cuda:0") and g.is_cuda
    for t in (a, g):
        ((t @ t.T).tanh().sum(1) * 2).mean().backward()
    np.testing.assert_allclose(g.grad.cpu().numpy(), a.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose((g + 1).cpu().numpy(), x + 1)
    assert (ember.ones(3, device="cuda") + ember.tensor(1.0)).device.type == "cuda"


# ---- factories on the meta device never compute or allocate --------------------------------
# Shapes of many TiB: a factory that drew or computed its values first would raise MemoryError.
B = 2 ** 40
META_FACTORIES = {
    "empty": lambda L: L.empty(B, 2 ** 20, device="meta"),
    "zeros": lambda L: L.zeros(B, device="meta", dtype=L.float64),
    "ones": lambda L: L.ones((B, 3), device="meta"),
    "full": lambda L: L.full((B,), 2.0, device="meta"),
    "tensor": lambda L: L.tensor([[1, 2]], device="meta"),
    "arange": lambda L: L.arange(B, device="meta"),
    "arange/float": lambda L: L.arange(0, 1, 1e-13, device="meta"),
    "arange/step": lambda L: L.arange(5, B, 3, device="meta"),
    "linspace": lambda L: L.linspace(0, 1, B, device="meta"),
    "logspace": lambda L: L.logspace(0, 1, B, device="meta", dtype=L.float64),
    "eye": lambda L: L.eye(2 ** 20, device="meta"),
    "eye/nm": lambda L: L.eye(2 ** 20, 3, device="meta", dtype=L.int32),
    "rand": lambda L: L.rand(2 ** 10, 3, 2 ** 16, 2 ** 16, device="meta"),
    "rand/complex": lambda L: L.rand(B, dtype=L.complex64, device="meta"),
    "randn": lambda L: L.randn(B, device="meta", dtype=L.float64),
    "randint": lambda L: L.randint(5, (B,), device="meta"),
    "randint/low_high": lambda L: L.randint(2, 5, (B, 2), device="meta", dtype=L.int16),
    "randperm": lambda L: L.randperm(B, device="meta"),
    "normal": lambda L: L.normal(0.0, 1.0, (B,), device="meta"),
    "normal/tensor": lambda L: L.normal(L.empty(B, device="meta"), 1.0),
    "rand_like": lambda L: L.rand_like(L.empty(B, device="meta")),
    "randn_like": lambda L: L.randn_like(L.empty(B, device="meta")),
    "randint_like": lambda L: L.randint_like(L.empty(B, device="meta"), 3),
    "full_like": lambda L: L.full_like(L.empty(B, device="meta"), 7),
    "bernoulli": lambda L: L.bernoulli(L.empty(B, device="meta")),
    "multinomial": lambda L: L.multinomial(L.empty(2 ** 20, 2 ** 20, device="meta"), 3),
    "poisson": lambda L: L.poisson(L.empty(B, device="meta")),
    "hann_window": lambda L: L.hann_window(B, device="meta"),
    "hamming_window": lambda L: L.hamming_window(B, periodic=False, device="meta"),
    "blackman_window": lambda L: L.blackman_window(B, device="meta"),
    "bartlett_window": lambda L: L.bartlett_window(B, device="meta"),
    "kaiser_window": lambda L: L.kaiser_window(B, device="meta"),
    "fftfreq": lambda L: L.fft.fftfreq(B, device="meta"),
    "rfftfreq": lambda L: L.fft.rfftfreq(B + 1, device="meta"),
    "tril_indices": lambda L: L.tril_indices(2 ** 20, 2 ** 20, device="meta"),
    "triu_indices": lambda L: L.triu_indices(2 ** 20, 2 ** 19, 5, device="meta"),
    "tril_indices/offset": lambda L: L.tril_indices(7, 5, -2, device="meta"),
}
META_FILLS = ["uniform_", "normal_", "random_", "bernoulli_", "exponential_", "cauchy_",
              "log_normal_", "geometric_", "zero_", "fill_"]


@pytest.mark.parametrize("name", META_FACTORIES)
def test_meta_factories_never_allocate(name):
    e, t = (META_FACTORIES[name](L) for L in (ember, torch))
    assert (tuple(e.shape), str(e.dtype), e.device.type) == (tuple(t.shape), str(t.dtype), "meta")


@pytest.mark.parametrize("name", META_FILLS)
def test_meta_random_fills_draw_nothing(name):
    args = {"geometric_": (0.5,), "fill_": (1.0,)}.get(name, ())
    for L in (ember, torch):
        t = L.empty(B, device="meta")
        assert getattr(t, name)(*args) is t and t.device.type == "meta"


@pytest.mark.parametrize("name", ["trunc_normal_", "orthogonal_", "sparse_", "eye_",
                                  "kaiming_uniform_", "xavier_normal_"])
def test_meta_nn_init_draws_nothing(name):
    args = {"sparse_": (0.5,)}.get(name, ())
    for L in (ember, torch):
        t = L.empty(2 ** 20, 2 ** 20, device="meta")
        assert getattr(L.nn.init, name)(t, *args) is t and t.device.type == "meta"


def test_meta_factory_cases_cover_every_factory_and_random_function():
    factories = {"empty", "zeros", "ones", "full", "tensor", "arange", "linspace", "logspace",
                 "eye", "rand", "randn", "randint", "randperm", "normal", "bernoulli",
                 "multinomial", "poisson", "hann_window", "hamming_window", "blackman_window",
                 "bartlett_window", "kaiser_window", "fftfreq", "rfftfreq", "tril_indices",
                 "triu_indices", "rand_like", "randn_like", "randint_like", "full_like"}
    assert factories <= {name.split("/")[0] for name in META_FACTORIES}
    fills = {n for n in ember._ops.random.TENSOR_METHODS if n.endswith("_")}
    assert fills <= set(META_FILLS)


# ---- the default device: `with device(...)` and set_default_device -----------------------------
_X = {}
DEFAULT_DEVICE_CASES = {
    "empty": lambda L: L.empty(2), "zeros": lambda L: L.zeros(2), "ones": lambda L: L.ones(2),
    "full": lambda L: L.full((2,), 1.0), "arange": lambda L: L.arange(3),
    "linspace": lambda L: L.linspace(0, 1, 3), "logspace": lambda L: L.logspace(0, 1, 3),
    "eye": lambda L: L.eye(2), "rand": lambda L: L.rand(2), "randn": lambda L: L.randn(2),
    "randint": lambda L: L.randint(3, (2,)), "randperm": lambda L: L.randperm(3),
    "normal": lambda L: L.normal(0.0, 1.0, (2,)), "tensor": lambda L: L.tensor([1.0]),
    "tensor_of_tensor": lambda L: L.tensor(_X[L]), "as_tensor": lambda L: L.as_tensor([1.0]),
    "as_tensor_numpy": lambda L: L.as_tensor(np.ones(2)), "as_tensor_tensor":
    lambda L: L.as_tensor(_X[L]), "asarray": lambda L: L.asarray([1.0]),
    "from_numpy": lambda L: L.from_numpy(np.ones(2)), "zeros_like": lambda L: L.zeros_like(_X[L]),
    "rand_like": lambda L: L.rand_like(_X[L]), "new_zeros": lambda L: _X[L].new_zeros(2),
    "legacy_size": lambda L: L.Tensor(2, 3), "legacy_data": lambda L: L.Tensor([1, 2]),
    "hann_window": lambda L: L.hann_window(4), "tril_indices": lambda L: L.tril_indices(3, 3),
    "fftfreq": lambda L: L.fft.fftfreq(4), "explicit": lambda L: L.ones(2, device="cpu"),
    "op": lambda L: _X[L] + 1, "bernoulli": lambda L: L.bernoulli(_X[L] * 0.5),
    "sparse_coo_tensor": lambda L: L.sparse_coo_tensor([[0]], [1.0], (2,)),
    "linear": lambda L: L.nn.Linear(2, 3).weight, "batchnorm_buffer":
    lambda L: L.nn.BatchNorm1d(3).running_mean, "get_default_device":
    lambda L: L.get_default_device(),
}


@pytest.mark.parametrize("name", DEFAULT_DEVICE_CASES)
def test_with_device_sets_the_default_device_of_factories(name):
    got = []
    for L in (ember, torch):
        _X[L] = L.ones(2)
        with L.device("meta"), pytest.warns() if name == "tensor_of_tensor" else _nothing():
            r = DEFAULT_DEVICE_CASES[name](L)
        got.append(str(getattr(r, "device", r)))
        assert str(getattr(DEFAULT_DEVICE_CASES[name](L), "device", "cpu")) == "cpu"
    assert got[0] == got[1]


def _nothing():
    import contextlib
    return contextlib.nullcontext()


def test_device_context_nests_and_leaves_the_device_object_alone():
    meta = ember.device("meta")
    with meta as d:
        assert d is meta and ember.zeros(1).device == meta
        with ember.device("cpu"):
            assert ember.zeros(1).device.type == "cpu"
            with meta:
                assert ember.get_default_device() == meta
            assert ember.get_default_device().type == "cpu"
        assert ember.ones(1).device == meta
    assert ember.get_default_device().type == "cpu" and ember.ones(1).device.type == "cpu"
    assert meta is ember.device("meta") and (meta.type, meta.index) == ("meta", None)


def test_set_default_device_is_per_thread_and_none_restores_cpu():
    import threading
    for L in (ember, torch):
        try:
            L.set_default_device("meta")
            assert L.get_default_device() == L.device("meta") and L.rand(2).device.type == "meta"
            with L.device("cpu"):
                assert L.rand(2).device.type == "cpu"
            seen = []
            t = threading.Thread(target=lambda: seen.append(L.ones(1).device.type))
            t.start()
            t.join()
            assert seen == ["cpu"] and L.arange(2).device.type == "meta"
        finally:
            L.set_default_device(None)
        assert L.get_default_device() == L.device("cpu") and L.zeros(1).device.type == "cpu"
    try:     # set inside a block, it takes over at once and outlives it (torch fails on exit)
        with ember.device("cpu"):
            ember.set_default_device("meta")
            assert ember.zeros(1).device.type == "meta"
        assert ember.zeros(1).device.type == "meta"
    finally:
        ember.set_default_device(None)


def test_a_cpu_model_trains_on_the_cpu_inside_a_meta_block():
    F = ember.nn.functional
    m = ember.nn.Sequential(ember.nn.Conv2d(1, 2, 3), ember.nn.ReLU(), ember.nn.Flatten(),
                            ember.nn.Linear(8, 3), ember.nn.LayerNorm(3))
    opt = ember.optim.AdamW(m.parameters())
    x, y = ember.randn(4, 1, 4, 4), ember.tensor([0, 1, 2, 0])
    with ember.device("meta"):
        out = m(x)
        loss = F.cross_entropy(out, y, label_smoothing=0.1) + F.dropout(out).softmax(-1).sum()
        loss.backward()
        opt.step()
        assert m[0].weight.device.type == "cpu" and np.isfinite(loss.item())
        with_meta = ember.nn.Linear(2 ** 20, 2 ** 20)      # 4 TiB of weights: none allocated
    assert with_meta.weight.device.type == "meta" and with_meta.weight.shape == (2 ** 20, 2 ** 20)
