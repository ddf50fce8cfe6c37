"""F.embedding / F.embedding_bag and their modules against torch (float64 values, weight and
per-sample-weight gradients, in-place max_norm renormalization, argument errors)."""
import numpy as np
import pytest

import ember
from oracle import assert_close, same, torch

rng = np.random.default_rng(1)
W = rng.standard_normal((10, 3)) * 2
IDX = np.array([1, 2, 4, 5, 4, 3, 2, 9, 0, 2])
OFF = np.array([0, 3, 3, 7])
IDX2 = IDX.reshape(2, 5)
PSW = rng.uniform(0.5, 2.0, IDX.shape)


def _both(call, psw=None):
    res = []
    for lib in (ember, torch):
        w = lib.tensor(W, requires_grad=True)
        p = lib.tensor(psw, requires_grad=True) if psw is not None else None
        out = call(lib, w, p)
        (out * lib.tensor(np.linspace(0.5, 1.5, out.numel()).reshape(tuple(out.shape)))
         ).sum().backward()
        res.append((out, w.grad, p.grad if p is not None else None, w.detach()))
    for i, what in enumerate(["out", "weight grad", "psw grad", "weight after"]):
        assert_close(res[0][i], res[1][i], rtol=1e-10, atol=1e-12, what=what)


@pytest.mark.parametrize("kw", [
    {}, {"padding_idx": 4}, {"padding_idx": -1, "scale_grad_by_freq": True},
    {"scale_grad_by_freq": True}, {"max_norm": 1.5}, {"max_norm": 2.0, "norm_type": 1.0},
], ids=str)
def test_embedding_matches_torch(kw):
    _both(lambda lib, w, p: lib.nn.functional.embedding(lib.tensor(IDX2), w, **kw))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("kw", [
    {}, {"padding_idx": 2}, {"include_last_offset": True}, {"max_norm": 1.0},
    {"input2d": True}, {"input2d": True, "padding_idx": 4},
], ids=str)
def test_embedding_bag_matches_torch(mode, kw):
    kw = dict(kw)
    two_d = kw.pop("input2d", False)

    def call(lib, w, p):
        if two_d:
            return lib.nn.functional.embedding_bag(lib.tensor(IDX2), w, mode=mode, **kw)
        return lib.nn.functional.embedding_bag(lib.tensor(IDX), w, lib.tensor(OFF), mode=mode,
                                               **kw)
    _both(call)


def test_embedding_bag_scale_grad_by_freq_is_embeddings():
    # NOTE: torch's embedding_bag divides some rows' gradients by another row's count (row 3,
    # used once here, gets 1/3); ember follows the documented rule, the one F.embedding keeps:
    # each row's gradient divided by its frequency in the mini-batch.
    w, w2 = (ember.tensor(W, requires_grad=True) for _ in range(2))
    F = ember.nn.functional
    F.embedding_bag(ember.tensor(IDX2), w, mode="sum", scale_grad_by_freq=True).sum().backward()
    F.embedding(ember.tensor(IDX2), w2, scale_grad_by_freq=True).sum().backward()
    assert_close(w.grad, w2.grad)


@pytest.mark.parametrize("kw", [{}, {"padding_idx": 4}, {"include_last_offset": True}])
def test_embedding_bag_per_sample_weights(kw):
    _both(lambda lib, w, p: lib.nn.functional.embedding_bag(
        lib.tensor(IDX), w, lib.tensor(OFF), mode="sum", per_sample_weights=p, **kw), PSW)


def test_embedding_bag_module_and_repr():
    for kw in [{}, {"mode": "max", "padding_idx": -2, "max_norm": 1.0, "norm_type": 3.0}]:
        e, t = ember.nn.EmbeddingBag(10, 3, **kw), torch.nn.EmbeddingBag(10, 3, **kw)
        assert repr(e) == repr(t)
        e.weight.data = ember.tensor(W)
        t.weight.data = torch.tensor(W)
        assert_close(e(ember.tensor(IDX), ember.tensor(OFF)),
                     t(torch.tensor(IDX), torch.tensor(OFF)), rtol=1e-10, atol=1e-12)
    e = ember.nn.EmbeddingBag.from_pretrained(ember.tensor(W), mode="sum")
    assert not e.weight.requires_grad
    assert repr(ember.nn.Embedding(5, 2, padding_idx=1, max_norm=1.0, scale_grad_by_freq=True)) \
        == repr(torch.nn.Embedding(5, 2, padding_idx=1, max_norm=1.0, scale_grad_by_freq=True))


@pytest.mark.parametrize("case", [
    lambda lib: lib.nn.functional.embedding_bag(lib.tensor(IDX2), lib.ones(10, 3),
                                                lib.tensor([0])),
    lambda lib: lib.nn.functional.embedding_bag(lib.tensor(IDX), lib.ones(10, 3)),
    lambda lib: lib.nn.functional.embedding_bag(lib.tensor(IDX), lib.ones(10, 3),
                                                lib.tensor([1, 3])),
    lambda lib: lib.nn.functional.embedding_bag(lib.tensor(IDX), lib.ones(10, 3),
                                                lib.tensor(OFF), mode="min"),
    lambda lib: lib.nn.functional.embedding_bag(lib.tensor(IDX), lib.ones(10, 3),
                                                lib.tensor(OFF), mode="max",
                                                scale_grad_by_freq=True),
    lambda lib: lib.nn.functional.embedding_bag(lib.tensor(IDX), lib.ones(10, 3),
                                                lib.tensor(OFF), mode="mean",
                                                per_sample_weights=lib.ones(10)),
    lambda lib: lib.nn.functional.embedding_bag(lib.tensor(IDX), lib.ones(10, 3),
                                                lib.tensor(OFF), per_sample_weights=lib.ones(9)),
    lambda lib: lib.nn.functional.embedding_bag(lib.tensor(IDX), lib.ones(10, 3, 1),
                                                lib.tensor(OFF)),
    lambda lib: lib.nn.functional.embedding(lib.tensor([1]), lib.ones(10, 3), padding_idx=10),
    lambda lib: lib.nn.EmbeddingBag(10, 3, padding_idx=-11),
])
def test_embedding_errors_match_torch(case):
    same(case, match=".")
