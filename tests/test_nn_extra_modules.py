"""nn modules and functions torch keeps for old code or rare uses: ChannelShuffle,
FractionalMaxPool2d/3d, FeatureAlphaDropout, NLLLoss2d, Container, upsample_nearest/bilinear,
native_channel_shuffle; against torch."""
import re
import warnings

import numpy as np
import pytest

import ember

torch = pytest.importorskip("torch")
R = np.random.default_rng(0)


def _both(fn):
    return fn(ember), fn(torch)


def _close(a, b):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6, atol=1e-6)


def test_channel_shuffle():
    x = R.standard_normal((2, 6, 3, 3)).astype(np.float32)
    (m, mo), (t, to) = [(L.nn.ChannelShuffle(3), L.nn.ChannelShuffle(3)(L.tensor(x)))
                        for L in (ember, torch)]
    assert repr(m) == repr(t)
    _close(mo, to)
    _close(ember.nn.functional.native_channel_shuffle(ember.tensor(x), 2),
           torch.nn.functional.native_channel_shuffle(torch.tensor(x), 2))


@pytest.mark.parametrize("nd", [2, 3])
def test_fractional_max_pool_with_fixed_samples(nd):
    shape = (2, 3) + (7,) * nd
    x = R.standard_normal(shape).astype(np.float32)
    samples = R.random((2, 3, nd)).astype(np.float32)
    for kw in ({"output_size": 4}, {"output_ratio": 0.5}, {"output_ratio": (0.6,) * nd}):
        outs = [getattr(L.nn, f"FractionalMaxPool{nd}d")(2, return_indices=True,
                                                          _random_samples=L.tensor(samples),
                                                          **kw)(L.tensor(x))
                for L in (ember, torch)]
        _close(outs[0][0], outs[1][0])
        assert outs[0][1].tolist() == outs[1][1].tolist()
    for kw in ({}, {"output_size": 2, "output_ratio": 0.5}, {"output_ratio": 1.5}):
        with pytest.raises(ValueError) as expected:
            getattr(torch.nn, f"FractionalMaxPool{nd}d")(2, **kw)
        with pytest.raises(ValueError, match=re.escape(str(expected.value))):
            getattr(ember.nn, f"FractionalMaxPool{nd}d")(2, **kw)


def test_feature_alpha_dropout():
    m, t = _both(lambda L: L.nn.FeatureAlphaDropout(0.3))
    assert repr(m) == repr(t)
    x = ember.randn(2, 4, 5)
    assert m.eval()(x) is x
    y = m.train()(ember.ones(8, 16, 10))
    assert (y.numpy().std(-1) < 1e-6).all()       # whole channels dropped or kept
    assert len(np.unique(y.numpy().round(5))) == 2


def test_deprecated_names_warn_as_torch():
    x = R.standard_normal((2, 3, 4, 4)).astype(np.float32)
    target = R.integers(0, 3, (2, 4, 4))
    for L in (ember, torch):
        with pytest.warns(FutureWarning, match="`NLLLoss2d` has been deprecated. Please use "
                                               "`NLLLoss` instead"):
            L.nn.NLLLoss2d()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (m, mo), (t, to) = [(L.nn.NLLLoss2d(reduction="sum"),
                             L.nn.NLLLoss2d(reduction="sum")(L.tensor(x), L.tensor(target)))
                            for L in (ember, torch)]
        assert isinstance(m, ember.nn.NLLLoss) and repr(m) == repr(t)
        _close(mo, to)
        c, tc = [L.nn.Container(a=L.nn.Linear(2, 3), b=L.nn.ReLU()) for L in (ember, torch)]
        assert repr(c) == repr(tc) and [n for n, _ in c.named_children()] == ["a", "b"]
    for L in (ember, torch):
        with pytest.warns(FutureWarning, match="`nn.Container` is deprecated"):
            L.nn.Container()
    for name, kw in (("upsample_nearest", {"scale_factor": 2}),
                     ("upsample_nearest", {"size": (5, 3)}),
                     ("upsample_bilinear", {"scale_factor": 2}),
                     ("upsample_bilinear", {"size": 7})):
        outs = []
        for L in (ember, torch):
            with pytest.warns(UserWarning, match=f"`nn.functional.{name}` is deprecated. Use "
                                                 "`nn.functional.interpolate` instead."):
                outs.append(getattr(L.nn.functional, name)(L.tensor(x), **kw))
        _close(*outs)


def test_convert_conv_weight_memory_format_and_skip_init():
    from ember.nn.utils import (convert_conv2d_weight_memory_format,
                                convert_conv3d_weight_memory_format, skip_init)
    m = ember.nn.Sequential(ember.nn.Conv2d(3, 8, 3), ember.nn.ReLU(),
                            ember.nn.Sequential(ember.nn.ConvTranspose2d(8, 4, 2)),
                            ember.nn.Conv3d(2, 2, 1))
    before = [p.detach().clone() for p in m.parameters()]
    assert convert_conv2d_weight_memory_format(m, ember.channels_last) is m
    assert m[0].weight.is_contiguous(memory_format=ember.channels_last)
    assert m[2][0].weight.is_contiguous(memory_format=ember.channels_last)
    assert m[3].weight.is_contiguous()             # 3-D: left alone by the 2-D conversion
    convert_conv3d_weight_memory_format(m, ember.channels_last_3d)
    assert m[3].weight.is_contiguous(memory_format=ember.channels_last_3d)
    assert all((a == b).all() for a, b in zip(before, m.parameters()))
    assert all(isinstance(p, ember.nn.Parameter) for p in m.parameters())
    lin = skip_init(ember.nn.Linear, 4, 2, bias=False)
    assert lin.weight.shape == (2, 4) and lin.weight.device.type == "cpu" and lin.bias is None
    assert skip_init(ember.nn.Linear, 4, 2, device="meta").weight.device.type == "meta"
    for bad in (int, ember.nn.ReLU):
        with pytest.raises(RuntimeError) as expected:
            torch.nn.utils.skip_init(int if bad is int else torch.nn.ReLU)
        with pytest.raises(RuntimeError, match=re.escape(str(expected.value).split(";")[0])):
            skip_init(bad)


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 9, 20])
def test_cross_map_lrn2d(size):
    x = R.standard_normal((2, 7, 3, 3)).astype(np.float32)
    (m, mo), (t, to) = [(L.nn.CrossMapLRN2d(size, 0.1, 0.75, 2.0),
                         L.nn.CrossMapLRN2d(size, 0.1, 0.75, 2.0)(L.tensor(x))) for L in (ember, torch)]
    assert repr(m) == repr(t)
    _close(mo, to)
    for L in (ember, torch):
        with pytest.raises(ValueError, match="Expected input to be 4D, got 3D"):
            L.nn.CrossMapLRN2d(3)(L.ones(2, 3, 4))


@pytest.mark.parametrize("head_bias", [False, True])
def test_adaptive_log_softmax_with_loss(head_bias):
    x = R.standard_normal((6, 16)).astype(np.float32)
    target = np.array([0, 3, 5, 9, 14, 19])
    mods = [L.nn.AdaptiveLogSoftmaxWithLoss(16, 20, [4, 10, 15], div_value=2.0,
                                            head_bias=head_bias) for L in (ember, torch)]
    mods[0].load_state_dict({k: ember.tensor(v.detach().numpy())
                             for k, v in mods[1].state_dict().items()})
    assert repr(mods[0]) == repr(mods[1])
    outs = [m(L.tensor(x, requires_grad=True), L.tensor(target))
            for L, m in zip((ember, torch), mods)]
    _close(outs[0].output, outs[1].output), _close(outs[0].loss, outs[1].loss)
    for o in outs:
        o.loss.backward()
    for (n, p), (_, q) in zip(mods[0].named_parameters(), mods[1].named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=n)
    _close(mods[0].log_prob(ember.tensor(x)), mods[1].log_prob(torch.tensor(x)))
    assert mods[0].predict(ember.tensor(x)).tolist() == mods[1].predict(torch.tensor(x)).tolist()
    single = [m(L.tensor(x[0]), L.tensor(target[3])) for L, m in zip((ember, torch), mods)]
    _close(single[0].output, single[1].output)
    for L, m in zip((ember, torch), mods):
        with pytest.raises(RuntimeError, match=r"Target values should be in \[0, 19\]"):
            m(L.tensor(x), L.tensor([0, 1, 2, 3, 4, 25]))
        with pytest.raises(ValueError, match="cutoffs should be a sequence of unique"):
            L.nn.AdaptiveLogSoftmaxWithLoss(8, 10, [5, 3])


def test_small_torch_helpers():
    import torch.nn.utils.rnn  # noqa: F401
    for L in (ember, torch):
        assert L.nn.factory_kwargs({"device": "cpu", "factory_kwargs": {"dtype": L.int8}}) == \
            {"dtype": L.int8, "device": "cpu"}
        with pytest.raises(TypeError, match="dtype specified twice"):
            L.nn.factory_kwargs({"dtype": L.int8, "factory_kwargs": {"dtype": L.int8}})
        with pytest.raises(TypeError, match="unexpected kwargs"):
            L.nn.factory_kwargs({"bad": 1})
        F = L.nn.functional
        F.assert_int_or_pair(3, "k", "{} bad")
        with pytest.raises(AssertionError, match="^k bad$"):
            F.assert_int_or_pair((1, 2, 3), "k", "{} bad")
        f = F.boolean_dispatch("twice", 1, False, lambda x, twice: 2 * x,
                               lambda x, twice=False: x, None, "f")
        assert (f(3), f(3, True), f(3, twice=True)) == (3, 6, 6)
        assert L.nn.utils.rnn.bind(None, abs) is None and L.nn.utils.rnn.bind(-2, abs) == 2
        assert L.nn.utils.rnn.PackedSequence_._fields == ("data", "batch_sizes",
                                                          "sorted_indices", "unsorted_indices")
