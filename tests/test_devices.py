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
    assert y.grad_fn.name() == "ToDeviceBackward0" and y.requires_grad


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
