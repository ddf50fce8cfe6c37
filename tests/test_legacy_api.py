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
    assert ember.autograd.variable.Variable is ember.autograd.Variable
