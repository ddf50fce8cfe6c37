"""Views against torch: storage sharing, ``_base``, shape/stride/offset/contiguity, writes
through views (values and version counters), and reshape's view-or-copy choice."""
import numpy as np
import pytest

import ember
from oracle import torch

# Each case is f(L, x) with L the library (ember or torch) and x a (3, 4, 5) float32 arange.
CASES = {
    "view": lambda L, x: x.view(12, 5),
    "view_-1": lambda L, x: x.view(-1),
    "view_dtype": lambda L, x: x.view(L.int32),
    "view_as": lambda L, x: x.view_as(x[0:3]),
    "reshape_view": lambda L, x: x.reshape(6, 10),
    "reshape_same": lambda L, x: x.reshape(3, 4, 5),
    "reshape_copy": lambda L, x: x.transpose(0, 1).reshape(-1),
    "reshape_of_transpose_view": lambda L, x: x.transpose(0, 1).reshape(4, 3, 5),
    "reshape_of_slice_copy": lambda L, x: x[:, 1:3].reshape(6, 5),
    "reshape_of_slice_view": lambda L, x: x[1:].reshape(-1),
    "transpose": lambda L, x: x.transpose(0, 2),
    "swapaxes": lambda L, x: x.swapaxes(0, 1),
    "permute": lambda L, x: x.permute(2, 0, 1),
    "t": lambda L, x: x[0].t(),
    "T": lambda L, x: x[0].T,
    "mT": lambda L, x: x.mT,
    "expand": lambda L, x: x[:, :1].expand(3, 4, 5),
    "expand_new_dims": lambda L, x: x[0].expand(2, 4, 5),
    "expand_new_size1": lambda L, x: x.expand(1, 3, 4, 5),
    "expand_keep_size1": lambda L, x: x[:, :1].expand(2, 3, 1, 5),
    "expand_as": lambda L, x: x[:1].expand_as(x),
    "broadcast_to": lambda L, x: L.broadcast_to(x[:1], (3, 4, 5)),
    "narrow": lambda L, x: x.narrow(1, 1, 2),
    "narrow_neg": lambda L, x: x.narrow(-1, -3, 2),
    "select": lambda L, x: x.select(1, 2),
    "slice": lambda L, x: x[1:, ::2, 1:4],
    "slice_neg": lambda L, x: x[-1, 1::3],
    "int_index": lambda L, x: x[1],
    "int_index_0d": lambda L, x: x[1, 2, 3],
    "int_index_0d_negative": lambda L, x: x[-1][-1][-1],
    "select_0d": lambda L, x: x[0, 0].select(0, 1),
    "unbind_0d": lambda L, x: x[2, 1].unbind(0)[4],
    "ellipsis": lambda L, x: x[..., 1],
    "none": lambda L, x: x[None, 1, :, None],
    "none_ellipsis": lambda L, x: x[None, ..., None, 1],
    "none_last": lambda L, x: x[..., None],
    "unsqueeze": lambda L, x: x.unsqueeze(1),
    "unsqueeze_-1": lambda L, x: x.unsqueeze(-1),
    "squeeze": lambda L, x: x[:, :1].squeeze(),
    "squeeze_dim": lambda L, x: x[:, :1].squeeze(1),
    "squeeze_noop": lambda L, x: x.squeeze(0),
    "squeeze_dims": lambda L, x: x[:1, :, :1].squeeze((0, 2)),
    "flatten": lambda L, x: x.flatten(),
    "flatten_1": lambda L, x: x.flatten(1),
    "flatten_copy": lambda L, x: x.transpose(0, 2).flatten(),
    "flatten_slice_copy": lambda L, x: x[:, 1].flatten(),
    "unflatten": lambda L, x: x.unflatten(2, (5, 1)),
    "as_strided": lambda L, x: x.as_strided((2, 2), (1, 2)),
    "as_strided_offset": lambda L, x: x.as_strided((2, 3), (3, 1), 7),
    "as_strided_of_view": lambda L, x: x[1].as_strided((2, 2), (1, 2)),
    "unfold": lambda L, x: x.unfold(2, 2, 1),
    "unfold_step": lambda L, x: x.unfold(1, 2, 2),
    "diagonal": lambda L, x: x.diagonal(),
    "diagonal_offset": lambda L, x: x.diagonal(1, 1, 2),
    "diagonal_neg": lambda L, x: x.diagonal(-1, 2, 0),
    "movedim": lambda L, x: x.movedim(0, 2),
    "moveaxis_multi": lambda L, x: x.movedim((0, 1), (2, 0)),
    "split": lambda L, x: x.split(2)[1],
    "split_sizes": lambda L, x: x.split([1, 3], 1)[1],
    "chunk": lambda L, x: x.chunk(2, 2)[1],
    "unbind": lambda L, x: x.unbind(1)[2],
    "view_as_complex": lambda L, x: L.view_as_complex(x.reshape(3, 10, 2)),
    "view_as_real": lambda L, x: L.view_as_real(L.view_as_complex(x.reshape(3, 10, 2))),
    "real": lambda L, x: L.view_as_complex(x.reshape(3, 10, 2)).real,
    "imag": lambda L, x: L.view_as_complex(x.reshape(3, 10, 2)).imag,
    "detach": lambda L, x: x.detach(),
    "chained": lambda L, x: x.transpose(0, 1)[1:].unsqueeze(0).narrow(2, 1, 2),
}
# Writes into these overlap (several elements, one address): torch refuses most in-place ops
# there (checked in test_write_into_expanded_view), and an unfold write's result depends on
# torch's element order.
OVERLAPPING = {"expand", "expand_new_dims", "expand_keep_size1", "expand_as", "broadcast_to",
               "unfold"}


def _base(L):
    return L.arange(60, dtype=L.float32).reshape(3, 4, 5)


def _layout(r, x):
    shares = r.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    # NOTE: an empty slice's offset is not compared: NumPy does not advance the data pointer
    # of an empty result (x[1:] of one element has offset 0, torch's is 1).
    offset = r.storage_offset() if r.numel() else None
    return dict(shape=tuple(r.shape), stride=tuple(r.stride()), offset=offset,
                contiguous=r.is_contiguous(), shares=shares, base_is_x=r._base is x,
                dtype=str(r.dtype).removeprefix("torch."))


@pytest.mark.parametrize("name", CASES)
def test_view_layout_matches_torch(name):
    xe, xt = _base(ember), _base(torch)
    assert _layout(CASES[name](ember, xe), xe) == _layout(CASES[name](torch, xt), xt)


def _write_through_view(name, write):
    """``write(L, view)`` in ember and torch: the same base values, and the same version bumps
    of base and view."""
    out = {}
    for L in (ember, torch):
        x = _base(L)
        r = CASES[name](L, x)
        v0 = x._version
        write(L, r)
        out[L.__name__] = (x.numpy().copy(), x._version - v0, r._version - v0)
    e, t = out["ember"], out["torch"]
    np.testing.assert_array_equal(e[0], t[0])
    assert e[1:] == t[1:]


@pytest.mark.parametrize("name", [n for n in CASES if n not in OVERLAPPING])
def test_write_through_view(name):
    """An in-place write shows in the base and bumps the version of base and view alike."""
    def write(L, r):
        if r.dtype.is_floating_point or r.dtype.is_complex:
            r.mul_(2).add_(1)
        else:
            r.fill_(7)
    _write_through_view(name, write)


@pytest.mark.parametrize("name", [n for n in CASES if n not in OVERLAPPING])
def test_setitem_through_view(name):
    def write(L, r):
        r[...] = 0 if r.dim() == 0 else L.zeros(r.shape[-1], dtype=r.dtype)
    _write_through_view(name, write)


def test_write_to_base_shows_in_view():
    x = ember.zeros(3, 4)
    v = x.t()
    x[1, 2] = 5
    assert v[2, 1].item() == 5 and v._version == x._version == 1


def test_write_into_expanded_view():
    for L in (ember, torch):
        x = L.zeros(3, 1)
        e = x.expand(3, 4)
        with pytest.raises(RuntimeError, match="more than one element of the written-to"):
            e.add_(1)
        with pytest.raises(RuntimeError, match="more than one element of the written-to"):
            e.copy_(L.ones(3, 4))
        with pytest.raises(RuntimeError, match="more than one element of the written-to"):
            e[0] = 1
        e.fill_(2)                     # fill_ may: every alias gets the same value
        x.expand(3, 1).add_(1)         # no overlap when the size stays 1
        e[:, :1].add_(1)
        e[:, 0] = e[:, 0] + 1
        assert x.flatten().tolist() == [5.0, 5.0, 5.0], L.__name__


@pytest.mark.parametrize("make", [
    lambda L: L.arange(12).reshape(3, 4), lambda L: L.arange(12).reshape(3, 4).t(),
    lambda L: L.arange(24).reshape(2, 3, 4)[:, 1:], lambda L: L.arange(24).reshape(2, 3, 4)[1],
    lambda L: L.arange(24).reshape(2, 3, 4).permute(1, 0, 2),
    lambda L: L.arange(24).reshape(2, 3, 4)[:, :, ::2], lambda L: L.zeros(3, 1).expand(3, 4)])
@pytest.mark.parametrize("shape", [(-1,), (4, 3), (2, 6), (6, 2), (12, 1), (1, 12), (3, 2, 2)])
def test_reshape_copies_exactly_when_torch_does(make, shape):
    xe, xt = make(ember), make(torch)
    if xe.numel() != int(np.prod([s for s in shape if s > 0])) and -1 not in shape:
        shape = (xe.shape[0], -1)
    re, rt = xe.reshape(shape), xt.reshape(shape)
    assert (re.untyped_storage().data_ptr() == xe.untyped_storage().data_ptr()) == \
        (rt.untyped_storage().data_ptr() == xt.untyped_storage().data_ptr())
    assert (re._base is not None) == (rt._base is not None)
    assert tuple(re.stride()) == tuple(rt.stride())
    np.testing.assert_array_equal(re.numpy(), rt.numpy())
    v0 = xe._version
    re.zero_()
    assert (xe._version != v0) == (rt._base is not None)


def test_view_refuses_incompatible_strides():
    for L in (ember, torch):
        with pytest.raises(RuntimeError, match="view size is not compatible"):
            L.arange(12).reshape(3, 4).t().view(-1)


def test_contiguous_returns_self_when_contiguous():
    x = ember.arange(12).reshape(3, 4)
    assert x.contiguous() is x
    t = x.t()
    c = t.contiguous()
    assert c is not t and c.is_contiguous() and c.untyped_storage() is not x.untyped_storage()
    assert c.stride() == torch.arange(12).reshape(3, 4).t().contiguous().stride()


def test_chained_view_base_is_the_root():
    x = ember.zeros(4, 4)
    v = x[1:][:, 1:].t()
    assert v._base is x and v.storage_offset() == 5
    v.add_(1)
    assert x.sum().item() == 9 and x._version == v._version == 1


def test_split_chunk_unbind_share_storage():
    x = ember.arange(10.0)
    for parts in (x.split(3), x.chunk(3), x.view(2, 5).unbind(0)):
        assert all(p._base is x and p.untyped_storage() is x.untyped_storage() for p in parts)
    ptr = x.untyped_storage().data_ptr()
    assert [p.data_ptr() - ptr for p in x.split(3)] == [0, 12, 24, 36]



@pytest.mark.parametrize("grad", [False, True])
def test_view_ops_with_keywords_and_several_outputs_match_torch(grad):
    # the quick path for views takes keywords and several outputs: the same links and graph
    def run(L):
        x = L.arange(24.0).reshape(2, 3, 4).requires_grad_(grad)
        a, b = x.split(2, dim=2)
        rows = x.unbind(dim=1)
        flat = x.transpose(dim0=0, dim1=2)
        seen = [(tuple(p.shape), p.stride(), p.storage_offset(), p._base is x,
                 p.grad_fn and p.grad_fn.name()) for p in (a, b, *rows, flat)]
        if grad:
            (a * 1 + b * 2).sum().add(rows[2].sum() + flat.sum()).backward()
            seen.append(x.grad.tolist())
            with pytest.raises(RuntimeError, match="multiple views"):
                a.mul_(2)
        return seen
    assert run(ember) == run(torch)


def test_view_errors_unchanged_by_the_quick_path():
    x = ember.zeros(2, 3)
    with pytest.raises(IndexError, match=r"range of \[-3, 2\], but got 3"):
        x.unsqueeze(3)
    with pytest.raises(IndexError, match="no dimensions"):
        ember.tensor(1.0).unbind()
    with pytest.raises(RuntimeError, match="invalid for input of size 6"):
        x.view(4, -1)
    with pytest.raises(RuntimeError, match="invalid for input of size 6"):
        x.reshape(5)
    assert [tuple(p.shape) for p in ember.zeros(0).split(2)] == [(0,)]


# ---- random chains of views (hypothesis) ----------------------------------------------------

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies


def _step(draw, shape):
    """One random view op valid for ``shape``, as f(L, x)."""
    nd = len(shape)
    kinds = ["unsqueeze", "reshape", "flatten"] + (["transpose", "slice", "narrow", "select",
                                                   "permute", "movedim", "diagonal", "unfold"]
                                                  if nd else []) + \
        (["squeeze"] if 1 in shape else []) + (["expand"] if 1 in shape else [])
    k = draw(st.sampled_from(kinds))
    d = draw(st.integers(0, max(nd - 1, 0)))
    if k == "unsqueeze":
        i = draw(st.integers(-nd - 1, nd))
        return k, lambda L, x: x.unsqueeze(i)
    if k == "reshape":
        new = (-1,) + shape[1:] if nd and 0 not in shape else shape[::-1] or (1,)
        return k, lambda L, x: x.reshape(new)
    if k == "flatten":
        return k, lambda L, x: x.flatten(d) if nd else x.flatten()
    if k == "transpose":
        e = draw(st.integers(0, nd - 1))
        return k, lambda L, x: x.transpose(d, e)
    if k == "slice":
        a = draw(st.integers(0, shape[d]))
        step = draw(st.integers(1, 3))
        return k, lambda L, x: x[(slice(None),) * d + (slice(a, None, step),)]
    if k == "narrow":
        a = draw(st.integers(0, shape[d]))
        n = draw(st.integers(0, shape[d] - a))
        return k, lambda L, x: x.narrow(d, a, n)
    if k == "select":
        if shape[d] == 0:
            return k, lambda L, x: x
        i = draw(st.integers(-shape[d], shape[d] - 1))
        return k, lambda L, x: x.select(d, i)
    if k == "permute":
        p = draw(st.permutations(range(nd)))
        return k, lambda L, x: x.permute(*p)
    if k == "movedim":
        e = draw(st.integers(-nd, nd - 1))
        return k, lambda L, x: x.movedim(d, e)
    if k == "diagonal":
        if nd < 2:
            return k, lambda L, x: x
        off = draw(st.integers(-2, 2))
        return k, lambda L, x: x.diagonal(off, 0, -1)
    if k == "unfold":
        size = draw(st.integers(1, max(shape[d], 1)))
        if size > shape[d]:
            return k, lambda L, x: x
        step = draw(st.integers(1, 2))
        return k, lambda L, x: x.unfold(d, size, step)
    if k == "squeeze":
        return k, lambda L, x: x.squeeze(shape.index(1))
    sizes = [draw(st.integers(1, 3)) if s == 1 else s for s in shape]
    return k, lambda L, x: x.expand(*sizes)


def _loose(layout):
    # NOTE: the stride of a size-1 dimension, or of any in an empty tensor, never addresses
    # memory; torch and NumPy pick different values there, so only the others are compared.
    empty = 0 in layout["shape"]
    layout["stride"] = tuple(st_ if n != 1 and not empty else None
                             for n, st_ in zip(layout["shape"], layout["stride"]))
    return layout


@hypothesis.settings(max_examples=150, deadline=None, derandomize=True)
@hypothesis.given(st.data())
def test_random_view_chains_match_torch(data):
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    xe = ember.arange(int(np.prod(shape)), dtype=ember.float32).reshape(shape)
    xt = torch.arange(int(np.prod(shape)), dtype=torch.float32).reshape(shape)
    re, rt, names = xe, xt, []
    for _ in range(data.draw(st.integers(1, 5))):
        name, f = _step(data.draw, tuple(rt.shape))
        names.append(name)
        re, rt = f(ember, re), f(torch, rt)
        assert _loose(_layout(re, xe)) == _loose(_layout(rt, xt)), names
        np.testing.assert_array_equal(re.numpy(), rt.numpy())
    if 0 not in [s for s, st_ in zip(rt.shape, rt.stride()) if st_ == 0 and s > 1] and \
            not any(st_ == 0 and s > 1 for s, st_ in zip(rt.shape, rt.stride())) and \
            "unfold" not in names:
        re.mul_(2).add_(1)
        rt.mul_(2).add_(1)
        np.testing.assert_array_equal(xe.numpy(), xt.numpy())
        assert (xe._version, re._version) == (xt._version, rt._version), names
