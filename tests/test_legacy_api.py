"""Names tutorials and older programs reach for: torch.autograd.Variable, torch.functional,
torch.utils.swap_tensors; each against torch."""
import warnings
import weakref

import numpy as np
import pytest

import ember
from oracle import torch


# ---- autograd.Variable ------------------------------------------------------------------------
def test_variable_is_a_leaf_sharing_data_with_requires_grad_as_given():
    for L in (ember, torch):
        Variable = L.autograd.Variable
        t = L.ones(2)
        v = Variable(t, requires_grad=True)
        assert v is not t and v.requires_grad and not t.requires_grad and v.is_leaf
        assert type(v) is L.Tensor and v.data_ptr() == t.data_ptr()
        assert isinstance(t, Variable) and not issubclass(L.Tensor, Variable)
        (v * 3).sum().backward()
        assert v.grad.tolist() == [3.0, 3.0]
        assert not Variable(t).requires_grad and Variable().shape == (0,)
        assert type(Variable(L.nn.Parameter(L.ones(1)))) is L.Tensor
        z = L.ones(1, requires_grad=True) * 2
        assert Variable(z).grad_fn is None and not Variable(z).requires_grad
        with pytest.raises(TypeError, match="Variable data has to be a tensor, but got list"):
            Variable([1, 2])
        with pytest.raises(RuntimeError, match="Only Tensors of floating point"):
            Variable(L.ones(2, dtype=L.long), requires_grad=True)
        with pytest.warns(UserWarning, match="volatile was removed"):
            Variable(t, volatile=True)


# ---- functional --------------------------------------------------------------------------------
def test_functional_has_torch_functionals_names():
    import ember.functional as F
    assert sorted(F.__all__) == sorted(torch.functional.__all__)
    for name in F.__all__:
        assert callable(getattr(F, name)), name
    from ember.functional import einsum, norm, split
    x = np.arange(6.0).reshape(2, 3)
    assert einsum("ij->j", ember.tensor(x)).tolist() == torch.functional.einsum(
        "ij->j", torch.tensor(x)).tolist()
    assert norm(ember.tensor(x)).item() == pytest.approx(torch.functional.norm(
        torch.tensor(x)).item())
    assert [p.tolist() for p in split(ember.tensor(x), 1, 1)] == \
        [p.tolist() for p in torch.functional.split(torch.tensor(x), 1, 1)]
    with pytest.raises(AttributeError):
        F.no_such_function


@pytest.mark.parametrize("shape, q, with_m", [((30, 8), 3, False), ((8, 30), 3, True),
                                              ((2, 20, 10), 4, False)])
def test_svd_lowrank_recovers_a_low_rank_matrix(shape, q, with_m):
    rng = np.random.default_rng(0)
    *b, m, n = shape
    a = rng.standard_normal((*b, m, q)) @ rng.standard_normal((*b, q, n))
    M = rng.standard_normal((1, n)) if with_m else None
    A = a + (M if with_m else 0)
    U, S, V = ember.svd_lowrank(ember.tensor(A), q=q, M=None if M is None else ember.tensor(M))
    tU, tS, tV = torch.svd_lowrank(torch.tensor(A), q=q, M=None if M is None else torch.tensor(M))
    assert (U.shape, S.shape, V.shape) == (tU.shape, tS.shape, tV.shape)
    np.testing.assert_allclose(S.numpy(), tS.numpy(), rtol=1e-8)
    back = U.numpy() @ (S.numpy()[..., None] * np.swapaxes(V.numpy(), -1, -2))
    np.testing.assert_allclose(back, a, atol=1e-9)


def test_pca_lowrank_matches_torch_and_checks_q():
    x = np.random.default_rng(1).standard_normal((40, 5)) @ np.diag([5.0, 3.0, 1.0, 0.1, 0.01])
    _, S, V = ember.pca_lowrank(ember.tensor(x), q=3, niter=4)
    _, tS, tV = torch.pca_lowrank(torch.tensor(x), q=3, niter=4)
    np.testing.assert_allclose(S.numpy(), tS.numpy(), rtol=1e-6)
    np.testing.assert_allclose(np.abs(V.numpy()), np.abs(tV.numpy()), atol=1e-6)
    for L in (ember, torch):
        with pytest.raises(ValueError, match=r"q\(=9\) must be non-negative integer"):
            L.pca_lowrank(L.tensor(x), q=9)
        assert L.pca_lowrank(L.tensor(x))[1].shape == (5,)


def test_svd_lowrank_is_differentiable():
    A = ember.randn(6, 4, dtype=ember.float64, requires_grad=True)
    _, S, _ = ember.svd_lowrank(A, q=4)
    S.sum().backward()
    assert A.grad.shape == (6, 4) and np.isfinite(A.grad.numpy()).all()


# ---- utils.swap_tensors ------------------------------------------------------------------------
def test_swap_tensors_swaps_data_class_and_attributes():
    for L in (ember, torch):
        a, b = L.zeros(2), L.nn.Parameter(L.ones(3))
        b.note = "b's"
        ref_a, ref_b = a, b
        L.utils.swap_tensors(a, b)
        assert ref_a is a and type(a) is L.nn.Parameter and a.requires_grad
        assert a.tolist() == [1.0, 1.0, 1.0] and a.note == "b's"
        assert type(b) is L.Tensor and b.tolist() == [0.0, 0.0] and not hasattr(b, "note")
        assert not b.requires_grad and ref_b is b


def test_swap_tensors_in_a_module_then_train():
    for L in (ember, torch):
        m = L.nn.Linear(2, 1)
        L.utils.swap_tensors(m.weight, L.nn.Parameter(L.full((1, 2), 2.0)))
        m(L.ones(1, 2)).sum().backward()
        assert m.weight.tolist() == [[2.0, 2.0]] and m.weight.grad.tolist() == [[1.0, 1.0]]


def test_swap_tensors_poisons_a_graph_made_before_and_refuses_weak_references():
    for L in (ember, torch):
        p, q = L.nn.Parameter(L.ones(2)), L.nn.Parameter(L.zeros(2))
        y = (p * 2).sum()
        L.utils.swap_tensors(p, q)
        with pytest.raises(RuntimeError, match="AccumulateGrad node that was poisoned"):
            y.backward()
        (p * 3).sum().backward()             # a graph made after the swap is fine
        assert p.grad.tolist() == [3.0, 3.0] and q.grad is None
        w = weakref.ref(p)
        with pytest.raises(RuntimeError, match="Cannot swap t2 because it has weakref"):
            L.utils.swap_tensors(q, p)
        assert w() is p


def test_swap_tensors_refuses_a_tensor_a_view_or_a_graph_holds():
    for L in (ember, torch):
        a = L.zeros(2)
        held = [a, a]
        w = L.ones(2, requires_grad=True)
        x = L.ones(2)
        y = (w * x).sum()           # saves x for w's gradient
        for t in (a, x):            # a's view; x's graph
            view = a[:1]
            with pytest.raises(RuntimeError, match="not possible to get the gradient edge"):
                L.utils.swap_tensors(t, L.ones(2))
            del view
        x2 = L.ones(2, requires_grad=True)
        y2 = (w * x2).sum()         # saved, and its accumulator
        h = L.ones(2, requires_grad=True) * 2
        z = h.sin()                 # a non-leaf its node saved
        for t, n in ((x2, 3), (h, 2)):
            with pytest.raises(RuntimeError, match=f"Expected use_count of t1 to be 1 or 2 with "
                                                   f"an AccumulateGrad node but got {n}"):
                L.utils.swap_tensors(t, L.ones(2))
        del y, y2, z
        L.utils.swap_tensors(a, L.ones(2))      # Python containers are no use
        assert held[0].tolist() == [1.0, 1.0]
