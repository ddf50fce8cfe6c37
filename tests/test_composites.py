"""Public functions and Tensor methods without an OpDef (ember/_composites.py and the plain
functions of ember/_ops/closeness.py), each run in torch and ember and compared."""
import numpy as np
import pytest

import ember
from oracle import assert_close, same, torch

A = np.arange(24.0).reshape(2, 3, 4)
M = np.arange(12.0).reshape(3, 4) - 5


def _t(lib, a=M, **kw):
    return lib.tensor(a, **kw)


CALLS = {
    "allclose": lambda lib: [lib.allclose(_t(lib), _t(lib) + 1e-7),
                             _t(lib).allclose(_t(lib) + 1, atol=0.5)],
    "equal": lambda lib: [lib.equal(_t(lib), _t(lib)), lib.equal(_t(lib), _t(lib)[:2]),
                          _t(lib).equal(_t(lib) + 1)],
    "is_same_size": lambda lib: [_t(lib).is_same_size(_t(lib).t()), lib.is_same_size(
        _t(lib), _t(lib) * 2)],
    "is_nonzero": lambda lib: [lib.is_nonzero(lib.tensor([2])), lib.tensor(0.).is_nonzero()],
    "is_nonzero_error": lambda lib: lib.is_nonzero(lib.tensor([1, 2])),
    "is_signed": lambda lib: [lib.is_signed(_t(lib)), lib.tensor([1], dtype=lib.uint8)
                              .is_signed(), lib.tensor([True]).is_signed()],
    "is_inference_distributed": lambda lib: [lib.is_inference(_t(lib)),
                                             _t(lib).is_distributed()],
    "detach_ravel": lambda lib: [lib.detach(_t(lib)), lib.ravel(_t(lib).t()),
                                 _t(lib, A).ravel()],
    "split_with_sizes": lambda lib: list(lib.split_with_sizes(_t(lib), [1, 3], 1)) +
    list(_t(lib).split_with_sizes([2, 1])),
    "unsafe_split_chunk": lambda lib: list(lib.unsafe_split(_t(lib), 2)) +
    list(_t(lib).unsafe_chunk(2, 1)) + list(lib.unsafe_split_with_sizes(_t(lib), [3, 1], 1))
    + list(_t(lib).unsafe_split(3, 1)),
    "unravel_index": lambda lib: list(lib.unravel_index(lib.tensor([0, 5, 23, -1]), (2, 3, 4)))
    + list(lib.unravel_index(lib.tensor(7), 10)),
    "unravel_index_error": lambda lib: lib.unravel_index(lib.tensor([1.5]), (2,)),
    "nonzero_static": lambda lib: [lib.nonzero_static(_t(lib), size=3),
                                   _t(lib).nonzero_static(size=14, fill_value=-7),
                                   lib.nonzero_static(lib.zeros(3), size=2)],
    "view_copies": lambda lib: [
        lib.alias_copy(_t(lib)), lib.as_strided_copy(_t(lib), (2, 2), (1, 2)),
        lib.detach_copy(_t(lib)), lib.diagonal_copy(_t(lib), 1), lib.expand_copy(
            _t(lib)[:1], (2, 4)), lib.permute_copy(_t(lib, A), (2, 0, 1)),
        lib.select_copy(_t(lib), 1, 2), lib.slice_copy(_t(lib), 1, 1, 4, 2),
        lib.squeeze_copy(_t(lib)[:1]), lib.t_copy(_t(lib)), lib.transpose_copy(_t(lib, A), 0, 2),
        lib.unfold_copy(_t(lib), 1, 2, 1), lib.unsqueeze_copy(_t(lib), 0),
        lib.view_copy(_t(lib), (6, 2))] + list(lib.split_copy(_t(lib), 2)) +
    list(lib.split_with_sizes_copy(_t(lib), [1, 3], 1)) + list(lib.unbind_copy(_t(lib), 1)),
    "copy_out": lambda lib: lib.t_copy(_t(lib), out=lib.empty(0, dtype=lib.float64)),
    "scatters": lambda lib: [
        lib.slice_scatter(_t(lib), lib.zeros(3, 2), 1, 1, 4, 2),
        _t(lib).slice_scatter(lib.ones(1, 4), start=2),
        lib.select_scatter(_t(lib), lib.ones(3), 1, -1),
        lib.diagonal_scatter(_t(lib), lib.ones(3), -1 + 1),
        _t(lib, A).diagonal_scatter(lib.ones(4, 2), 0, 0, 1),
        lib.as_strided_scatter(_t(lib), lib.ones(2, 2), (2, 2), (4, 1), 1)],
    "scatter_size_error": lambda lib: lib.select_scatter(_t(lib), lib.ones(4), 1, 0),
    "new": lambda lib: [_t(lib).new(2, 3).shape, _t(lib).new([1, 2]), _t(lib).new().shape,
                        str(_t(lib, M.astype(np.int32)).new([1.5]).dtype)],
    "new_empty_strided": lambda lib: [_t(lib).new_empty_strided((2, 3), (1, 2)).stride(),
                                      str(_t(lib).new_empty_strided((2, 3), (3, 1)).dtype)],
    "dim_order": lambda lib: [_t(lib, A).dim_order(), _t(lib, A).permute(2, 0, 1).dim_order(),
                              _t(lib, A).transpose(0, 1).dim_order()],
    "storage_type_etc": lambda lib: [_t(lib).is_pinned(), _t(lib).is_shared(),
                                     _t(lib).share_memory_(), _t(lib).const_data_ptr() != 0],
    "apply_map": lambda lib: [_t(lib).apply_(lambda v: v * 2 + 1),
                              _t(lib).map_(_t(lib)[0], lambda a, b: a - b),
                              _t(lib).map2_(_t(lib), _t(lib)[:, :1], lambda a, b, c: a + b * c)],
    "sum_to_size": lambda lib: [_t(lib, A).sum_to_size(3, 1), _t(lib, A).sum_to_size((1, 1, 4)),
                                _t(lib).sum_to_size(3, 4)],
    "sum_to_size_error": lambda lib: _t(lib).sum_to_size(2, 4),
    "resize_as": lambda lib: [_t(lib).resize_as_(lib.ones(2, 2)),
                              _t(lib).t().contiguous().resize_as_(lib.ones(6))],
    "fill_diagonal_": lambda lib: [lib.zeros(3, 4).fill_diagonal_(2.),
                                   lib.zeros(7, 3).fill_diagonal_(1, wrap=True),
                                   lib.zeros(7, 3).fill_diagonal_(1),
                                   lib.zeros(2, 2, 2).fill_diagonal_(3)],
    "fill_diagonal_error": lambda lib: lib.zeros(2, 3, 3).fill_diagonal_(1),
    "adjoint": lambda lib: [lib.adjoint(_t(lib, A)), _t(lib).adjoint(),
                            lib.adjoint(lib.tensor([[1 + 2j, 3j]])).resolve_conj()],
    "adjoint_error": lambda lib: lib.adjoint(lib.ones(3)),
    "lu_solve": lambda lib: [lib.lu_solve(_t(lib, M[:, :2]), *lib.linalg.lu_factor(
        _t(lib, M[:, :3] + 4 * np.eye(3)))), _t(lib, M[:, :1]).lu_solve(*lib.linalg.lu_factor(
            _t(lib, M[:, 1:] + 5 * np.eye(3))))],
    "old_norms": lambda lib: [lib.frobenius_norm(_t(lib, A), (0, 2)),
                              lib.frobenius_norm(_t(lib), [1], keepdim=True),
                              lib.nuclear_norm(_t(lib)), lib.nuclear_norm(_t(lib, A), True),
                              lib.nuclear_norm(_t(lib, A), (0, 2), True)],
    "norm_except_dim": lambda lib: [lib.norm_except_dim(_t(lib, A), 2, 1),
                                    lib.norm_except_dim(_t(lib), 3, 0),
                                    lib.norm_except_dim(_t(lib, A), 2, -1)],
    "polygamma_method": lambda lib: [_t(lib, np.abs(M) + 1).polygamma(1),
                                     _t(lib, np.abs(M) + 1).polygamma_(2)],
    "polygamma_inplace_int": lambda lib: lib.tensor([1, 2]).polygamma_(1),
    "more_copies": lambda lib: [lib.view_as_real_copy(lib.tensor([1 + 2j])),
                                lib.view_as_complex_copy(_t(lib, M.reshape(6, 2)))],
}


@pytest.mark.parametrize("name", CALLS)
def test_matches_torch(name):
    same(CALLS[name])


def test_sparse_indices_and_values_copies():
    # (torch 2.13 has no SparseCPU kernel for these: checked against the views themselves)
    s = ember.eye(3).to_sparse()
    i, v = ember.indices_copy(s), ember.values_copy(s)
    assert i.tolist() == s.indices().tolist() and v.tolist() == s.values().tolist()
    assert i.data_ptr() != s.indices().data_ptr() and v.data_ptr() != s.values().data_ptr()


def test_as_subclass_module_load_and_storage():
    class Sub(ember.Tensor):
        pass
    x = ember.ones(2, requires_grad=True)
    s = x.as_subclass(Sub)
    # NOTE: as torch, the subclass view stays in the graph (AliasBackward0)
    assert type(s) is Sub and s.data_ptr() == x.data_ptr() and s.grad_fn.name() == "AliasBackward0"
    with pytest.raises(TypeError):
        x.as_subclass(int)
    y = ember.ones(2, requires_grad=True)
    assert x.module_load(y, assign=True) is y and not x.module_load(y).requires_grad
    assert x.storage().data_ptr() == x.untyped_storage().data_ptr()
    assert ember.ones(2).storage_type() == "torch.FloatStorage"
    if not ember.cuda.is_available() and not torch.cuda.is_available():
        msgs = []       # no pinned memory without a GPU: torch's errors
        for lib in (ember, torch):
            for pin in (lambda: lib.ones(2).pin_memory(), lambda: lib.ones(2, pin_memory=True),
                        lambda: lib.tensor([1.0], pin_memory=True),
                        lambda: lib.randn(2, pin_memory=True),
                        lambda: lib.full((2,), 1.0, pin_memory=True)):
                with pytest.raises(RuntimeError) as e:
                    pin()
                msgs.append(str(e.value))
        assert msgs[:5] == msgs[5:]
    with pytest.raises(RuntimeError, match="unknown parameter type"):
        x.record_stream(None)


@pytest.mark.parametrize("name", ["slice", "select", "diagonal"])
def test_scatter_gradients_match_torch(name):
    args = {"slice": (1, 0, 4, 2), "select": (0, 1), "diagonal": (1,),
            "as_strided": ((2, 2), (4, 1), 1)}[name]
    src_shape = {"slice": (3, 2), "select": (4,), "diagonal": (3,), "as_strided": (2, 2)}[name]

    def grads(lib):
        x = lib.tensor(M, requires_grad=True)
        s = lib.tensor(np.arange(np.prod(src_shape), dtype=float).reshape(src_shape) + 1,
                       requires_grad=True)
        out = getattr(lib, name + "_scatter")(x, s, *args)
        (out * lib.tensor(M)).sum().backward()
        return out, x.grad, s.grad
    for e, t in zip(grads(ember), grads(torch)):
        assert_close(e, t)


def test_as_strided_scatter_gradients():
    # NOTE: torch's as_strided_scatter backward (for functionalization) does not give the
    # input's gradient of the function; ember's is checked against finite differences.
    x = ember.tensor(M, requires_grad=True)
    s = ember.ones(2, 2, dtype=ember.float64, requires_grad=True)
    assert ember.autograd.gradcheck(
        lambda a, b: ember.as_strided_scatter(a, b, (2, 2), (4, 1), 1), (x, s))
