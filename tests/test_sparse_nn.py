"""Sparse gradients against torch: nn.Embedding / EmbeddingBag with ``sparse=True`` (the
gradient's entries, accumulation over two backward passes), SGD on sparse gradients and
SparseAdam over 25 float64 steps, and their errors."""
import numpy as np
import pytest

import ember
from oracle import assert_close, same, torch
from test_sparse import assert_sparse

pytestmark = pytest.mark.filterwarnings("ignore:Sparse invariant checks")

rng = np.random.default_rng(3)
W = rng.standard_normal((10, 3))
IDX = np.array([[1, 2, 4, 5], [4, 3, 2, 9]])
WEIGHTS = np.linspace(0.5, 1.5, 24).reshape(2, 4, 3)


def _embedding_grads(make, passes=1):
    res = []
    for lib in (ember, torch):
        m = make(lib)
        with lib.no_grad():
            m.weight.copy_(lib.tensor(W))
        for k in range(passes):
            (m(lib.tensor(IDX[:, k:])) * lib.tensor(WEIGHTS[:, k:])).sum().backward()
        res.append(m.weight.grad)
    return res


@pytest.mark.parametrize("kw", [{}, {"padding_idx": 4}, {"padding_idx": -1}], ids=str)
def test_embedding_sparse_gradient(kw):
    e, t = _embedding_grads(lambda lib: lib.nn.Embedding(10, 3, sparse=True, **kw))
    assert e.is_sparse and t.is_sparse
    assert_sparse(e, t)
    assert e._nnz() == t._nnz()            # one entry per looked-up row, padding left out
    assert_close(e._indices(), t._indices())
    assert_close(e._values(), t._values())


def test_embedding_sparse_gradient_accumulates():
    e, t = _embedding_grads(lambda lib: lib.nn.Embedding(10, 3, sparse=True), passes=2)
    assert_sparse(e, t, coalesced=False)
    assert not e.is_coalesced()


def test_functional_embedding_sparse():
    res = []
    for lib in (ember, torch):
        w = lib.tensor(W, requires_grad=True)
        lib.nn.functional.embedding(lib.tensor(IDX), w, sparse=True).pow(2).sum().backward()
        res.append(w.grad)
    assert_sparse(*res)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_sparse_gradient(mode):
    res = []
    for lib in (ember, torch):
        m = lib.nn.EmbeddingBag(10, 3, mode=mode, sparse=True)
        with lib.no_grad():
            m.weight.copy_(lib.tensor(W))
        out = m(lib.tensor(IDX.reshape(-1)), lib.tensor([0, 3, 3]))
        (out * lib.tensor(WEIGHTS[0, :3])).sum().backward()
        res.append(m.weight.grad)
    assert_sparse(*res)


def test_sparse_gradient_with_scale_grad_by_freq_raises():
    same(lambda lib: lib.nn.Embedding(10, 3, sparse=True, scale_grad_by_freq=True)(
        lib.tensor(IDX)).sum().backward(), "scale_grad_by_freq not supported with sparse")


# ---- optimizers -------------------------------------------------------------------------------

def _train(lib, opt_name, kw, steps=25):
    """An embedding (sparse gradients) and a dense layer, float64; returns the weights."""
    emb = lib.nn.Embedding(10, 3, sparse=True).double()
    lin = lib.nn.Linear(3, 1).double()
    with lib.no_grad():
        emb.weight.copy_(lib.tensor(W))
        lin.weight.copy_(lib.tensor([[0.3, -0.2, 0.5]]))
        lin.bias.fill_(0.1)
    opt = getattr(lib.optim, opt_name)(emb.parameters(), **kw)
    data = np.random.default_rng(5)
    for _ in range(steps):
        x = lib.tensor(data.integers(0, 10, (4, 3)))
        y = lib.tensor(data.standard_normal((4, 3, 1)))
        opt.zero_grad()
        ((lin(emb(x)) - y) ** 2).mean().backward()
        opt.step()
    return emb.weight.detach(), opt


@pytest.mark.parametrize("name,kw", [
    ("SparseAdam", dict(lr=0.05)),
    ("SparseAdam", dict(lr=0.05, betas=(0.8, 0.9), eps=1e-6, maximize=True)),
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, maximize=True)),
    ("SGD", dict(lr=0.05, momentum=0.9)),
], ids=str)
def test_optimizer_with_sparse_gradients_matches_torch(name, kw):
    (e, e_opt), (t, t_opt) = _train(ember, name, kw), _train(torch, name, kw)
    np.testing.assert_allclose(e.numpy(), t.numpy(), rtol=1e-10, atol=1e-12)
    if name == "SparseAdam":
        (es,), (ts,) = e_opt.state.values(), t_opt.state.values()
        assert es["step"] == ts["step"] == 25
        assert_close(es["exp_avg"], ts["exp_avg"], rtol=1e-10, atol=1e-12)
        assert_close(es["exp_avg_sq"], ts["exp_avg_sq"], rtol=1e-10, atol=1e-12)


def test_sparse_adam_rejects_dense_gradients():
    def run(lib):
        w = lib.nn.Parameter(lib.ones(3))
        opt = lib.optim.SparseAdam([w])
        (w * w).sum().backward()
        opt.step()
    same(run, "SparseAdam does not support dense gradients, please consider Adam instead")


@pytest.mark.parametrize("kw,match", [(dict(lr=0.0), "Invalid learning rate"),
                                      (dict(eps=0.0), "Invalid epsilon value"),
                                      (dict(betas=(0.9, 1.0)), "beta parameter at index 1")])
def test_sparse_adam_checks_hyper_parameters(kw, match):
    same(lambda lib: lib.optim.SparseAdam([lib.nn.Parameter(lib.ones(2))], **kw), match)


def test_sparse_adam_rejects_sparse_and_complex_params():
    same(lambda lib: lib.optim.SparseAdam([lib.ones(2).to_sparse()]),
         r"Sparse params at indices \[\[0, 0\]\]: SparseAdam requires dense parameter tensors")
    same(lambda lib: lib.optim.SparseAdam([lib.ones(2, dtype=lib.complex64)]),
         "SparseAdam does not support complex parameters")


def test_adam_rejects_sparse_gradients():
    def run(lib):
        emb = lib.nn.Embedding(4, 2, sparse=True)
        opt = lib.optim.Adam(emb.parameters())
        emb(lib.tensor([1])).sum().backward()
        opt.step()
    same(run, "Adam does not support sparse gradients")


def test_clip_grad_norm_with_sparse_gradients():
    # NOTE: torch's foreach norm has no sparse kernel; ember clips the stored values, which
    # gives the clipping of the dense gradient
    grads = []
    for dense in (False, True):
        emb = ember.nn.Embedding(10, 3, sparse=True)
        with ember.no_grad():
            emb.weight.copy_(ember.tensor(W))
        (emb(ember.tensor(IDX)) ** 2).sum().backward()
        if dense:
            emb.weight.grad = emb.weight.grad.to_dense()
        total = ember.nn.utils.clip_grad_norm_(emb.parameters(), 1.0)
        grads.append((total, emb.weight.grad.to_dense()))
    assert_close(grads[0][0], grads[1][0])
    assert_close(grads[0][1], grads[1][1])
    assert grads[0][1].norm().item() == pytest.approx(1.0, rel=1e-6)


def test_sparse_adam_state_dict_round_trip_keeps_an_int_step(tmp_path):
    _, opt = _train(ember, "SparseAdam", dict(lr=0.05), steps=3)
    ember.save(opt.state_dict(), tmp_path / "opt.pt")
    assert torch.load(tmp_path / "opt.pt")["state"][0]["step"] == 3
    emb = ember.nn.Embedding(10, 3, sparse=True)
    again = ember.optim.SparseAdam(emb.parameters(), lr=0.05)
    again.load_state_dict(ember.load(tmp_path / "opt.pt"))
    st = again.state[emb.weight]
    assert st["step"] == 3 and type(st["step"]) is int
    assert_close(st["exp_avg"], opt.state[next(iter(opt.state))]["exp_avg"])
