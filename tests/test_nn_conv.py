"""Convolution, pooling, padding, resampling and normalization layers against torch: values and
gradients in float64 (functional), double backward for the composites, modules' repr, state
dict and forward with torch's weights."""
import math

import numpy as np
import pytest

import ember
from oracle import assert_close, torch

rng = np.random.default_rng(0)


def arr(*shape, low=-2.0, high=2.0):
    return rng.uniform(low, high, shape)


X1, X2, X3 = arr(2, 4, 9), arr(2, 4, 7, 8), arr(1, 2, 5, 6, 4)
W1, W2, W3 = arr(6, 2, 3), arr(6, 4, 3, 2), arr(4, 2, 2, 3, 2)
B6 = arr(6)
POS = arr(2, 3, 6, 5, low=0.1, high=2.0)

# (name or fn(F, *tensors), arrays (all differentiable), kwargs)
CASES = [
    ("conv1d", [X1, W1, B6], dict(stride=2, padding=1, groups=2)),
    # >= 16 channels per group on both sides with unit strides: one BLAS GEMM per kernel tap
    ("conv2d", [arr(2, 32, 10, 9), arr(32, 16, 3, 2), arr(32)], dict(padding=1, groups=2)),
    ("conv1d", [arr(2, 16, 60), arr(16, 16, 3)], dict(padding=2, dilation=2)),
    # 3x3, unit stride, >= 16 channels per group on a side: Winograd, with partial tiles
    ("conv2d", [arr(1, 16, 5, 7), arr(32, 8, 3, 3), arr(32)], dict(padding=1, groups=2)),
    ("conv3d", [arr(1, 16, 4, 5, 6), arr(16, 16, 2, 1, 2)], dict(padding=(1, 0, 1))),
    ("conv_transpose2d", [arr(2, 16, 12, 13), arr(16, 16, 3, 3), arr(16)], dict(padding=1)),
    ("conv1d", [X1, arr(8, 1, 3)], dict(padding="same", dilation=2, groups=4)),
    ("conv2d", [X2, W2, B6], dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2))),
    ("conv2d", [X2, W2[:, :2]], dict(padding="same", groups=2)),
    ("conv2d", [X2, arr(4, 1, 3, 3)], dict(padding=1, groups=4)),
    ("conv2d", [X2[0], W2], dict(padding="valid")),
    ("conv3d", [X3, W3, B6[:4]], dict(stride=(1, 2, 1), padding=1)),
    ("conv_transpose1d", [X1, arr(4, 3, 3), B6], dict(stride=2, padding=1, output_padding=1,
                                                      groups=2)),
    ("conv_transpose2d", [X2, arr(4, 2, 3, 2)], dict(stride=(2, 3), padding=(0, 1),
                                                     dilation=(2, 1), output_padding=(1, 2))),
    ("conv_transpose2d", [X2, arr(4, 1, 2, 2), B6[:4]], dict(groups=4)),
    ("conv_transpose3d", [X3, arr(2, 3, 2, 2, 3)], dict(stride=2, padding=(1, 0, 1))),
    ("conv_transpose1d", [X1, arr(4, 2, 3)], dict(dilation=3, output_padding=2)),
    ("max_pool1d", [X1], dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    ("max_pool2d", [X2], dict(kernel_size=(3, 2), stride=2, dilation=(1, 2), padding=1)),
    ("max_pool2d", [X2], dict(kernel_size=3, ceil_mode=True)),
    ("max_pool3d", [X3], dict(kernel_size=2, stride=(1, 2, 2), padding=(1, 0, 1))),
    ("avg_pool1d", [X1], dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
    ("avg_pool2d", [X2], dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    ("avg_pool2d", [X2], dict(kernel_size=(2, 3), stride=2, padding=1, ceil_mode=True,
                              count_include_pad=False)),
    ("avg_pool2d", [X2], dict(kernel_size=2, divisor_override=3)),
    ("avg_pool3d", [X3], dict(kernel_size=(3, 2, 2), stride=2, padding=1)),
    ("adaptive_avg_pool1d", [X1], dict(output_size=4)),
    ("adaptive_avg_pool2d", [X2], dict(output_size=(3, None))),
    ("adaptive_avg_pool2d", [X2], dict(output_size=1)),
    ("adaptive_avg_pool3d", [X3], dict(output_size=(2, 4, 3))),
    ("adaptive_max_pool1d", [X1], dict(output_size=4)),
    ("adaptive_max_pool2d", [X2], dict(output_size=(3, 5))),
    ("adaptive_max_pool3d", [X3], dict(output_size=(2, 4, 3))),
    ("lp_pool1d", [POS[0]], dict(norm_type=2.0, kernel_size=2)),
    ("lp_pool2d", [POS], dict(norm_type=3.0, kernel_size=(2, 3), stride=1)),
    (lambda F, x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2,
                                 output_size=(7, 9)), [X2], {}),
    (lambda F, x: F.max_unpool1d(*F.max_pool1d(x, 3, 2, return_indices=True), 3, 2),
     [X1], {}),
    ("unfold", [X2], dict(kernel_size=(2, 3), dilation=(2, 1), padding=1, stride=(1, 2))),
    ("fold", [arr(2, 12, 12)], dict(output_size=(5, 6), kernel_size=2, padding=1, stride=2)),
    ("pad", [X2], dict(pad=(1, 2, -1, 3), value=0.5)),
    ("pad", [X1], dict(pad=(3, 2), mode="reflect")),
    ("pad", [X2], dict(pad=(1, 2, 2, 0), mode="replicate")),
    ("pad", [X3], dict(pad=(1, 2, 2, 0, 1, 1), mode="circular")),
    ("pad", [X2], dict(pad=(2, 1, 1, 3), mode="reflect")),
    ("interpolate", [X1], dict(size=13, mode="linear")),
    ("interpolate", [X1], dict(scale_factor=1.7, mode="linear", align_corners=True)),
    ("interpolate", [X2], dict(scale_factor=(1.5, 2.3), mode="nearest")),
    ("interpolate", [X2], dict(size=(5, 11), mode="nearest-exact")),
    ("interpolate", [X2], dict(size=(11, 5), mode="bilinear")),
    ("interpolate", [X2], dict(scale_factor=0.6, mode="bilinear", align_corners=True)),
    ("interpolate", [X2], dict(size=(9, 13), mode="bicubic")),
    ("interpolate", [X2], dict(scale_factor=1.6, mode="bicubic", align_corners=True)),
    ("interpolate", [X3], dict(size=(3, 7, 5), mode="trilinear")),
    ("interpolate", [X2], dict(size=(3, 5), mode="area")),
    # torch ignores the scale factor of a dim that keeps its size, or doubles in 2-d nearest
    ("interpolate", [X2], dict(scale_factor=(1.1, 2.2), mode="bilinear")),
    ("interpolate", [X2], dict(scale_factor=(2.1, 1.05), mode="nearest")),
    ("interpolate", [X1], dict(scale_factor=2.1, mode="nearest-exact")),
    ("pixel_shuffle", [arr(2, 8, 3, 2)], dict(upscale_factor=2)),
    ("pixel_unshuffle", [arr(1, 2, 6, 4)], dict(downscale_factor=2)),
    (lambda F, x, w, b: F.batch_norm(x, None, None, w, b, True), [X2, arr(4), arr(4)], {}),
    (lambda F, x, w, b: F.batch_norm(x, F.adaptive_avg_pool1d(w[None], 4)[0].detach(),
                                     b.detach().abs() + 0.5, w, b), [X1, arr(4), arr(4)], {}),
    (lambda F, x, w, b: F.group_norm(x, 2, w, b), [X2, arr(4), arr(4)], {}),
    ("group_norm", [X3], dict(num_groups=1, eps=1e-3)),
    (lambda F, x, w, b: F.instance_norm(x, weight=w, bias=b), [X2, arr(4), arr(4)], {}),
    ("local_response_norm", [X1], dict(size=3)),
    ("local_response_norm", [X2], dict(size=2, alpha=0.1, beta=0.5, k=2.0)),
    ("normalize", [X2], dict(p=3.0, dim=2)),
    ("normalize", [np.vstack([X1[0], np.zeros((1, 9))])], {}),
    ("cosine_similarity", [X2, arr(2, 1, 7, 8)], dict(dim=1)),
    ("pairwise_distance", [arr(5, 4), arr(5, 4)], dict(p=1.5, keepdim=True)),
    ("pairwise_distance", [arr(5, 4), arr(4)], {}),
]


def _fn(lib, name):
    F = lib.nn.functional
    return getattr(F, name) if isinstance(name, str) else (lambda *a, **k: name(F, *a, **k))


def _ids():
    return [f"{c[0] if isinstance(c[0], str) else 'lambda'}-{i}" for i, c in enumerate(CASES)]


def _run(lib, name, arrays, kwargs, create_graph=False):
    ins = [lib.tensor(a, requires_grad=True) for a in arrays]
    out = _fn(lib, name)(*ins, **kwargs)
    w = lib.tensor(np.random.default_rng(1).standard_normal(tuple(out.shape)))
    # squared for double backward, so that linear ops' gradients depend on their inputs
    loss = (out * out * w).sum() if create_graph else (out * w).sum()
    grads = lib.autograd.grad(loss, ins, create_graph=create_graph)
    return ins, out, grads


@pytest.mark.parametrize("name,arrays,kwargs", CASES, ids=_ids())
def test_functional_values_and_grads_match_torch(name, arrays, kwargs):
    _, eo, eg = _run(ember, name, arrays, kwargs)
    _, to, tg = _run(torch, name, arrays, kwargs)
    assert_close(eo, to, rtol=1e-9, atol=1e-10, what="value")
    assert_close(list(eg), list(tg), rtol=1e-9, atol=1e-10, what="grad")


DOUBLE = [c for c in CASES if c[0] in ("avg_pool2d", "conv_transpose2d", "interpolate",
                                       "group_norm", "pad", "unfold", "fold", "conv1d",
                                       "max_pool2d", "adaptive_avg_pool2d")][::2]


@pytest.mark.parametrize("name,arrays,kwargs", DOUBLE, ids=[c[0] for c in DOUBLE])
def test_double_backward_matches_torch(name, arrays, kwargs):
    res = []
    for lib in (ember, torch):
        ins, _, g = _run(lib, name, arrays, kwargs, create_graph=True)
        v = [lib.tensor(np.random.default_rng(2).standard_normal(tuple(t.shape))) for t in g]
        gg = lib.autograd.grad(sum((a * b).sum() for a, b in zip(g, v)), ins,
                               allow_unused=True)
        res.append(list(gg))
    assert_close(res[0], res[1], rtol=1e-9, atol=1e-10, what="gradgrad")


def test_batch_norm_updates_running_stats_like_torch():
    x = arr(5, 3, 4)
    stats = []
    for lib in (ember, torch):
        rm, rv = lib.zeros(3, dtype=lib.float64), lib.ones(3, dtype=lib.float64)
        lib.nn.functional.batch_norm(lib.tensor(x), rm, rv, training=True, momentum=0.3)
        rm2, rv2 = lib.zeros(3, dtype=lib.float64), lib.ones(3, dtype=lib.float64)
        lib.nn.functional.instance_norm(lib.tensor(x), rm2, rv2, momentum=0.2)
        stats.append([rm, rv, rm2, rv2])
    assert_close(stats[0], stats[1], rtol=1e-12, atol=1e-12)


def test_return_indices_match_torch():
    for name, x, k in [("max_pool2d", X2, dict(kernel_size=3, stride=2, padding=1)),
                       ("adaptive_max_pool1d", X1, dict(output_size=4)),
                       ("max_pool3d", X3, dict(kernel_size=2, ceil_mode=True))]:
        e = getattr(ember.nn.functional, name)(ember.tensor(x), return_indices=True, **k)
        t = getattr(torch.nn.functional, name)(torch.tensor(x), return_indices=True, **k)
        assert_close(list(e), list(t), what=name)


def test_max_pool_propagates_nan_like_torch():
    x = np.arange(16.0).reshape(1, 1, 4, 4)
    x[0, 0, 0, 1] = x[0, 0, 1, 0] = x[0, 0, 3, 3] = np.nan
    e = ember.nn.functional.max_pool2d(ember.tensor(x), 2, return_indices=True)
    t = torch.nn.functional.max_pool2d(torch.tensor(x), 2, return_indices=True)
    assert_close(list(e), list(t))


@pytest.mark.parametrize("call,error,match", [
    (lambda F, t: F.conv2d(t(2, 3, 5, 5), t(4, 2, 3, 3)), RuntimeError,
     r"expected input\[2, 3, 5, 5\] to have 2 channels, but got 3"),
    (lambda F, t: F.conv2d(t(1, 1, 2, 2), t(1, 1, 3, 3)), RuntimeError,
     r"Kernel size can't be greater than actual input size"),
    (lambda F, t: F.conv2d(t(1, 1, 5, 5), t(1, 1, 3, 3), stride=2, padding="same"), RuntimeError,
     r"padding='same' is not supported for strided convolutions"),
    (lambda F, t: F.conv1d(t(5, 5), t(1, 1, 3, 3)), RuntimeError, r"Expected"),
    (lambda F, t: F.max_pool2d(t(1, 1, 5, 5), 2, padding=2), RuntimeError,
     r"pad should be at most half of effective kernel size"),
    (lambda F, t: F.max_pool2d(t(1, 1, 3, 3), 2, dilation=3), RuntimeError,
     r"[Oo]utput size"),
    (lambda F, t: F.group_norm(t(2, 5, 3), 2), RuntimeError,
     r"divisible by num_groups"),
    (lambda F, t: F.batch_norm(t(1, 3), None, None, training=True), ValueError,
     r"Expected more than 1 value per channel when training"),
    (lambda F, t: F.pixel_shuffle(t(1, 5, 2, 2), 2), RuntimeError, r"divisible"),
    (lambda F, t: F.interpolate(t(1, 1, 4), size=3, mode="bilinear"), NotImplementedError,
     r"bilinear mode needs 4D input"),
    (lambda F, t: F.conv_transpose1d(t(1, 1, 3), t(1, 1, 2), padding=2), RuntimeError,
     r"Output size is too small"),
])
def test_errors_match_torch(call, error, match):
    for lib in (ember, torch):
        with pytest.raises(error, match=match):
            call(lib.nn.functional, lambda *s: lib.ones(*s))


# ---- modules ---------------------------------------------------------------------------------

MODULES = [
    ("Conv1d", (4, 6, 3), dict(stride=2, padding=1, groups=2, padding_mode="circular")),
    ("Conv2d", (4, 6, 3), dict(padding="same", padding_mode="reflect", bias=False)),
    ("Conv2d", (4, 6, (3, 2)), dict(stride=(2, 1), dilation=2, padding=(2, 1),
                                    padding_mode="replicate")),
    ("Conv2d", (4, 4, 3), dict(padding="valid", groups=4)),
    ("Conv3d", (2, 4, 2), dict(padding=1)),
    ("ConvTranspose1d", (4, 6, 3), dict(stride=2, output_padding=1, groups=2)),
    ("ConvTranspose2d", (4, 6, 3), dict(stride=2, padding=1, dilation=2, bias=False)),
    ("ConvTranspose3d", (2, 4, 2), dict(stride=2)),
    ("MaxPool1d", (3,), dict(stride=2, padding=1)), ("MaxPool2d", (3, 2), dict(ceil_mode=True)),
    ("MaxPool3d", ((2, 1, 2),), {}), ("AvgPool1d", (3,), dict(stride=2, padding=1)),
    ("AvgPool2d", (3,), dict(stride=1, padding=1, count_include_pad=False)),
    ("AvgPool3d", (2,), dict(divisor_override=2)), ("LPPool1d", (2, 3), {}),
    ("LPPool2d", (2, 2), dict(stride=1)), ("AdaptiveAvgPool1d", (3,), {}),
    ("AdaptiveAvgPool2d", ((3, None),), {}), ("AdaptiveAvgPool3d", (2,), {}),
    ("AdaptiveMaxPool1d", (3,), {}), ("AdaptiveMaxPool2d", ((2, 3),), {}),
    ("AdaptiveMaxPool3d", (1,), {}), ("ZeroPad2d", ((1, 0, 2, 1),), {}),
    ("ConstantPad1d", (2, 3.5), {}), ("ConstantPad3d", (1, -1.0), {}),
    ("ReflectionPad1d", (2,), {}), ("ReflectionPad2d", ((1, 2, 0, 1),), {}),
    ("ReplicationPad2d", (2,), {}), ("ReplicationPad3d", (1,), {}),
    ("CircularPad2d", (1,), {}), ("Upsample", (), dict(scale_factor=2, mode="bilinear")),
    ("Upsample", (), dict(size=(5, 9), mode="nearest")),
    ("UpsamplingBilinear2d", (), dict(scale_factor=2)),
    ("PixelShuffle", (2,), {}), ("PixelUnshuffle", (2,), {}),
    ("Unfold", ((2, 3),), dict(padding=1)), ("Fold", ((4, 5), 2), {}),
    ("BatchNorm1d", (4,), dict(momentum=None)), ("BatchNorm2d", (4,), dict(affine=False)),
    ("BatchNorm3d", (2,), dict(track_running_stats=False)),
    ("InstanceNorm1d", (4,), dict(affine=True, track_running_stats=True)),
    ("InstanceNorm2d", (4,), {}), ("InstanceNorm3d", (2,), dict(affine=True)),
    ("GroupNorm", (2, 4), {}), ("LocalResponseNorm", (3,), {}),
]
INPUTS = {"1d": X1, "2d": X2, "3d": X3}


def _input(cls, args):
    if cls in ("PixelShuffle", "PixelUnshuffle"):
        return arr(2, 4, 6, 4)
    if cls == "Fold":
        return arr(2, 8, 12)
    if cls in ("Upsample", "UpsamplingBilinear2d", "Unfold", "GroupNorm", "LocalResponseNorm"):
        return X2
    return INPUTS[cls[-2:]] if cls[-2:] in INPUTS else X2


@pytest.mark.parametrize("cls,args,kwargs", MODULES,
                         ids=[f"{m[0]}-{i}" for i, m in enumerate(MODULES)])
def test_module_repr_state_dict_and_forward_match_torch(cls, args, kwargs):
    t = getattr(torch.nn, cls)(*args, **kwargs).double()
    e = getattr(ember.nn, cls)(*args, **kwargs).double()
    assert repr(e) == repr(t)
    ts, es = t.state_dict(), e.state_dict()
    assert [(k, tuple(v.shape)) for k, v in es.items()] == \
        [(k, tuple(v.shape)) for k, v in ts.items()]
    assert dict(es._metadata) == dict(ts._metadata)
    e.load_state_dict({k: ember.tensor(v.numpy()) for k, v in ts.items()})
    x = _input(cls, args)
    for train in (True, False):            # twice in training mode: running stats move
        e.train(train)
        t.train(train)
        xe, xt = ember.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        oe, ot = e(xe), t(xt)
        if isinstance(ot, tuple):
            oe, ot = oe[0], ot[0]
        assert_close(oe, ot, rtol=1e-9, atol=1e-10, what=f"{cls} forward")
        (oe * oe).sum().backward()
        (ot * ot).sum().backward()
        assert_close(xe.grad, xt.grad, rtol=1e-9, atol=1e-9, what=f"{cls} grad")
    for (n, pe), (_, pt) in zip(e.named_parameters(), t.named_parameters()):
        assert_close(pe.grad, pt.grad, rtol=1e-9, atol=1e-9, what=n)
    for (n, be), (_, bt) in zip(e.named_buffers(), t.named_buffers()):
        assert_close(be, bt, rtol=1e-12, atol=1e-12, what=n)


def test_batchnorm_cumulative_average_and_eval_match_torch():
    e, t = ember.nn.BatchNorm2d(4, momentum=None).double(), \
        torch.nn.BatchNorm2d(4, momentum=None).double()
    for i in range(3):
        x = arr(3, 4, 2, 2) * (i + 1)
        e(ember.tensor(x))
        t(torch.tensor(x))
    assert_close(list(e.state_dict().values()), list(t.state_dict().values()))
    e.eval()
    t.eval()
    assert_close(e(ember.tensor(X2)), t(torch.tensor(X2)), rtol=1e-12, atol=1e-12)


def test_conv_init_and_lazy_conv():
    m = ember.nn.Conv2d(8, 16, 3, groups=2)
    bound = 1 / math.sqrt(4 * 9)
    assert m.weight.shape == (16, 4, 3, 3) and m.weight.abs().max().item() <= bound
    assert m.weight.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.15)
    assert ember.nn.ConvTranspose2d(8, 16, 3, groups=2).weight.shape == (8, 8, 3, 3)
    lazy = ember.nn.LazyConv2d(6, 3, padding=1)
    out = lazy(ember.randn(2, 5, 4, 4))
    assert type(lazy) is ember.nn.Conv2d and lazy.in_channels == 5
    assert out.shape == (2, 6, 4, 4) and lazy.weight.shape == (6, 5, 3, 3)
    assert repr(lazy) == repr(torch.nn.Conv2d(5, 6, 3, padding=1))


def test_conv_transpose_output_size_matches_torch():
    t = torch.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1).double()
    e = ember.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1).double()
    e.load_state_dict({k: ember.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    x = arr(1, 3, 4, 5)
    assert_close(e(ember.tensor(x), output_size=[8, 10]),
                 t(torch.tensor(x), output_size=[8, 10]), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="requested an output size of"):
        e(ember.tensor(x), output_size=(12, 10))


@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "transposed"])
def test_conv_gradients_under_saved_tensor_hooks_that_detach(transposed):
    # the hooks hand back tensors without requires_grad: the graph (needs_input_grad), not the
    # saved tensors, says which gradients the backward computes
    name = "conv_transpose2d" if transposed else "conv2d"
    x0, w0, b0 = arr(2, 4, 6, 5), arr(4, 3, 3, 3), arr(3 if transposed else 4)
    if not transposed:
        w0 = arr(4, 4, 3, 3)

    def grads(lib, wants):
        ts = [lib.tensor(a, requires_grad=r) for a, r in zip((x0, w0, b0), wants)]
        with lib.autograd.graph.saved_tensors_hooks(lambda t: t.detach(), lambda t: t):
            y = getattr(lib.nn.functional, name)(*ts, padding=1)
        (y * y).sum().backward()
        return [t.grad for t in ts]
    for wants in [(True, True, True), (True, False, False), (False, True, True)]:
        for g, ref in zip(grads(ember, wants), grads(torch, wants)):
            assert (g is None) == (ref is None)
            if g is not None:
                assert_close(g, ref)


def test_small_cnn_trains_like_torch():
    def build(nn):
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, stride=2, padding=1),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3))
    t = build(torch.nn).double()
    e = build(ember.nn).double()
    e.load_state_dict({k: ember.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    x, y = arr(4, 3, 8, 8), np.array([0, 2, 1, 1])
    le = ember.nn.functional.cross_entropy(e(ember.tensor(x)), ember.tensor(y))
    lt = torch.nn.functional.cross_entropy(t(torch.tensor(x)), torch.tensor(y))
    le.backward()
    lt.backward()
    assert_close(le, lt, rtol=1e-10, atol=1e-12)
    for (n, pe), (_, pt) in zip(e.named_parameters(), t.named_parameters()):
        assert_close(pe.grad, pt.grad, rtol=1e-8, atol=1e-10, what=n)
