"""``F.embedding`` and ``F.embedding_bag``: row lookups with torch's padding, max_norm
renormalization and gradient scaling by frequency."""
import numpy as np

import ember

from ..autograd.composite import one_node
from ..autograd.function import Function
from ..autograd.grad_mode import no_grad
from .._ops.nn import check_embedding_range as _check_embedding_range
from .._ops.nn import embedding as _embedding

__all__ = ["embedding", "embedding_bag"]


class _GatherRows(Function):
    """``weight[index]`` (flat index) whose backward weighs each row's gradient by ``scale``
    (0 at padding_idx, 1/count with scale_grad_by_freq) before adding it into place; with
    ``sparse`` the weight's gradient is a sparse COO tensor of those rows instead."""

    @staticmethod
    def forward(ctx, weight, index, scale, sparse=False, padding_idx=None):
        ctx.save_for_backward(index, scale)
        ctx.rows, ctx.sparse, ctx.padding_idx = weight.shape[0], sparse, padding_idx
        return weight[index]

    @staticmethod
    def backward(ctx, g):
        index, scale = ctx.saved_tensors
        if ctx.sparse:
            return _sparse_grad(ctx, g, index, scale), None, None, None, None
        gw = ember.zeros((ctx.rows,) + tuple(g.shape[1:]), dtype=g.dtype, device=g.device)
        return gw.index_add(0, index, g * scale.unsqueeze(1)), None, None, None, None


def _sparse_grad(ctx, g, index, scale):
    """torch's ``embedding_sparse_backward``: one uncoalesced entry per looked-up row (padding
    rows left out), holding that row's gradient."""
    if scale is not None:
        raise RuntimeError("embedding_backward: scale_grad_by_freq not supported with sparse "
                           "gradients")
    if ctx.padding_idx is not None:
        keep = (index != ctx.padding_idx).nonzero().reshape(-1)
        index, g = index.index_select(0, keep), g.index_select(0, keep)
    return ember.sparse_coo_tensor(index.unsqueeze(0), g, (ctx.rows,) + tuple(g.shape[1:]))


def _rows(weight, flat, padding_idx, scale_grad_by_freq, sparse=False):
    """The rows of ``weight`` at the int64 array ``flat``, with torch's gradient rules."""
    index = ember.tensor(flat, device=weight.device)
    if sparse:
        scale = None if not scale_grad_by_freq else ember.ones(flat.shape)
        return _GatherRows.apply(weight, index, scale, True, padding_idx)
    if padding_idx is None and not scale_grad_by_freq:
        return weight[index]
    scale = np.ones(flat.shape)
    if scale_grad_by_freq:
        counts = np.bincount(flat, minlength=weight.shape[0])
        scale = 1.0 / counts[flat]
    if padding_idx is not None:
        scale = np.where(flat == padding_idx, 0.0, scale)
    return _GatherRows.apply(weight, index, ember.tensor(scale, dtype=weight.dtype,
                                                         device=weight.device))


def _renorm_(weight, flat, max_norm, norm_type):
    """torch's ``embedding_renorm_``: rows used by ``flat`` whose ``norm_type``-norm passes
    ``max_norm`` are scaled in place to ``max_norm / (norm + 1e-7)`` of themselves."""
    with no_grad():
        rows = ember.tensor(np.unique(flat), device=weight.device)
        w = weight[rows]
        norm = w.norm(norm_type, 1, keepdim=True)
        factor = ember.where(norm > max_norm, max_norm / (norm + 1e-7), 1.0)
        weight[rows] = w * factor


def _check_index(input, what="indices"):
    if input.dtype.category != 1:
        raise RuntimeError(f"Expected tensor for argument #1 '{what}' to have one of the "
                           f"following scalar types: Long, Int; but got {input.type()} instead")


def _padding(padding_idx, weight):
    if padding_idx is None:
        return None
    n = weight.shape[0]
    if not -n <= padding_idx < n:
        raise AssertionError("Padding_idx must be within num_embeddings")
    return padding_idx % n


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """Rows of ``weight`` at the integer indices ``input``; the ``padding_idx`` row gets no
    gradient, ``max_norm`` renormalizes the looked-up rows of ``weight`` in place first.

    Example:
        >>> import ember
        >>> w = ember.tensor([[3.0, 4.0], [1.0, 0.0]])
        >>> ember.nn.functional.embedding(ember.tensor([0, 0]), w, max_norm=1.0)
        tensor([[0.6000, 0.8000],
                [0.6000, 0.8000]])
        >>> w[0]                    # renormalized in place
        tensor([0.6000, 0.8000])
    """
    _check_index(input)
    padding_idx = _padding(padding_idx, weight)
    if max_norm is None and not scale_grad_by_freq and not sparse:
        return _embedding(weight, input, -1 if padding_idx is None else padding_idx)
    flat = input.detach().cpu().numpy().reshape(-1).astype(np.int64)
    _check_embedding_range(flat, weight.shape[0])
    if max_norm is not None:
        _renorm_(weight, flat, max_norm, norm_type)

    def lookup(weight):
        out = _rows(weight, flat, padding_idx, scale_grad_by_freq, sparse)
        return out.reshape(tuple(input.shape) + (weight.shape[1],))
    return lookup(weight) if sparse else one_node("EmbeddingBackward0", lookup, weight)


def _bags(input, offsets, per_sample_weights, include_last_offset):
    """Flat indices, per-element bag ids, the number of bags and flat per-sample weights."""
    if input.dim() == 2:
        if offsets is not None:
            raise ValueError("if input is 2D, then offsets has to be None, as input is treated "
                             "is a mini-batch of fixed length sequences. However, found offsets "
                             f"of type {type(offsets)}")
        n, k = input.shape
        bag = np.repeat(np.arange(n), k)
        psw = per_sample_weights.reshape(-1) if per_sample_weights is not None else None
        return input.detach().cpu().numpy().reshape(-1).astype(np.int64), bag, n, psw
    if input.dim() != 1:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension "
                         f"{input.dim()}")
    if offsets is None:
        raise ValueError("offsets has to be a 1D Tensor but got None")
    if offsets.dim() != 1:
        raise ValueError("offsets has to be a 1D Tensor")
    off = offsets.detach().cpu().numpy().astype(np.int64)
    flat = input.detach().cpu().numpy().astype(np.int64)
    if off.size and off[0] != 0:
        raise RuntimeError(f"offsets[0] has to be 0, i.e., the first sequence in the mini-batch "
                           f"has to start from position 0. However, got {off[0]}")
    n = off.size - 1 if include_last_offset else off.size
    # NOTE: with include_last_offset the last offset should be len(input); when it is not,
    # torch's generic kernel (float64, and float32 mean/max) runs the last bag to the end of
    # the input, and so do we (its float32 'sum' fast path stops at the last offset).
    bag = np.searchsorted(off[:n], np.arange(flat.size), side="right") - 1
    return flat, bag, n, per_sample_weights


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2,
                  scale_grad_by_freq=False, mode="mean", sparse=False, per_sample_weights=None,
                  include_last_offset=False, padding_idx=None):
    """Sums, means or maxima of bags of embedding rows, without materializing the rows of
    each bag separately. A 2-D ``input`` is one bag per row; a 1-D ``input`` is split at
    ``offsets``. ``padding_idx`` entries are left out of their bag (and of its mean's count);
    an empty bag gives zeros.

    Example:
        >>> import ember
        >>> w = ember.arange(6.0).reshape(3, 2)
        >>> F = ember.nn.functional
        >>> F.embedding_bag(ember.tensor([0, 2, 1]), w, ember.tensor([0, 2]), mode="sum")
        tensor([[4., 6.],
                [2., 3.]])
    """
    if per_sample_weights is not None and tuple(input.shape) != tuple(per_sample_weights.shape):
        raise ValueError(f"embedding_bag: If per_sample_weights ({per_sample_weights.shape}) is "
                         f"not None, then it must have the same shape as the input ({input.shape})")
    if weight.dim() != 2:
        raise ValueError(f"weight has to be a 2D Tensor, but got Tensor of dimension "
                         f"{weight.dim()}")
    _check_index(input)
    flat, bag, n, psw = _bags(input, offsets, per_sample_weights, include_last_offset)
    _check_embedding_range(flat, weight.shape[0])
    if mode not in ("sum", "mean", "max"):
        raise ValueError("mode has to be one of sum, mean or max")
    if mode == "max" and scale_grad_by_freq:
        raise ValueError("max mode does not support scaling the gradient by the frequency")
    if mode == "max" and sparse:
        raise ValueError("max mode does not support sparse weights")
    if max_norm is not None:
        _renorm_(weight, flat, max_norm, norm_type)
    if psw is not None and mode != "sum":
        raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. "
                                  f"per_sample_weights is only supported for mode='sum' (got "
                                  f"mode='{mode}'). Please open a feature request on GitHub.")
    padding_idx = _padding(padding_idx, weight)
    keep = flat != padding_idx if padding_idx is not None else np.ones(flat.shape, bool)
    flat, bag = flat[keep], bag[keep]

    def bags(weight, psw):
        if mode == "max":
            return _bag_max(weight, flat, bag, n)
        rows = _rows(weight, flat, None, scale_grad_by_freq, sparse)
        if psw is not None:
            rows = rows * psw[ember.tensor(np.nonzero(keep)[0], device=weight.device)].unsqueeze(1)
        out = ember.zeros(n, weight.shape[1], dtype=rows.dtype, device=weight.device).index_add(
            0, ember.tensor(bag, device=weight.device), rows)
        if mode == "mean":
            count = np.maximum(np.bincount(bag, minlength=n), 1)
            out = out / ember.tensor(count, dtype=out.dtype, device=out.device).unsqueeze(1)
        return out
    # (a sparse gradient stays the rows' own: the node's reentrant backward would densify it)
    return bags(weight, psw) if sparse else one_node("EmbeddingBagBackward0", bags, weight, psw)


def _bag_max(weight, flat, bag, n):
    """Per bag and feature, the largest entry; the gradient goes to that entry's row."""
    w = weight.detach().cpu().numpy()
    d = w.shape[1]
    arg = np.zeros((n, d), np.int64)
    nonempty = np.zeros(n, bool)
    for b in np.unique(bag):
        members = flat[bag == b]
        arg[b] = members[w[members].argmax(0)]
        nonempty[b] = True
    out = weight[ember.tensor(arg, device=weight.device), ember.arange(d, device=weight.device)]
    return out * ember.tensor(nonempty, dtype=out.dtype, device=out.device).unsqueeze(1)
