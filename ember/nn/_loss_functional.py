"""The rarer ``torch.nn.functional`` losses: Poisson/Gaussian NLL, CTC, margin and embedding
losses. Each is a composition of ember ops (so autograd needs no new rule) except CTC, whose
forward-backward recursion runs on arrays inside an ``autograd.Function`` with torch's gradient.
"""
import math

import numpy as np

import ember

from ..amp.autocast_mode import autocast_policy
from ..autograd.function import Function
from . import functional as _F
from ._norm_functional import pairwise_distance
from ..autograd.composite import recorded_as

__all__ = ["poisson_nll_loss", "gaussian_nll_loss", "ctc_loss", "margin_ranking_loss",
           "hinge_embedding_loss", "multilabel_margin_loss", "multilabel_soft_margin_loss",
           "soft_margin_loss", "multi_margin_loss", "cosine_embedding_loss",
           "triplet_margin_loss", "triplet_margin_with_distance_loss", "linear_cross_entropy"]


def _reduction(size_average, reduce, reduction, valid=("none", "mean", "sum"), msg=None):
    reduction = _F._legacy(size_average, reduce, reduction)
    if reduction not in valid:
        raise ValueError(msg or f"{reduction} is not a valid value for reduction")
    return reduction


@autocast_policy("autocast_fp32")
def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8,
                     reduce=None, reduction="mean"):
    """Negative log-likelihood of ``target`` under a Poisson with rate ``exp(input)`` (or
    ``input`` when ``log_input=False``); ``full`` adds Stirling's term where target > 1.

    Example:
        >>> import ember
        >>> F = ember.nn.functional
        >>> F.poisson_nll_loss(ember.zeros(3), ember.tensor([1.0, 2.0, 0.0]))
        tensor(1.)
    """
    reduction = _reduction(size_average, reduce, reduction)
    loss = input.exp() - target * input if log_input else input - target * (input + eps).log()
    if full:
        stirling = target * target.log() - target + 0.5 * (2 * math.pi * target).log()
        loss = loss + stirling.masked_fill(target <= 1, 0)
    return _F._reduce(loss, reduction)


@autocast_policy("autocast_fp32")
def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """``0.5 (log var + (input - target)^2 / var)``, var clamped to ``eps`` (the clamp passes
    the gradient through, as torch's in-place clamp under no_grad); ``var`` may be one dim
    short of ``input`` or have one broadcast dim.

    Example:
        >>> import ember
        >>> F = ember.nn.functional
        >>> F.gaussian_nll_loss(ember.zeros(2), ember.tensor([2.0, 0.0]), ember.ones(2))
        tensor(1.)
    """
    if isinstance(var, (int, float)):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        var = ember.ones_like(input) * var
    elif bool((var < 0).any()):
        raise ValueError("var has negative entry/entries")
    ishape, vshape = tuple(input.shape), tuple(var.shape)
    if vshape != ishape:
        if ishape[:-1] == vshape:
            var = var.unsqueeze(-1)
        elif not (len(ishape) == len(vshape) and
                  sum(v for i, v in zip(ishape, vshape) if i != v) == 1):
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    var = var + (var.clamp(min=eps) - var).detach()
    loss = 0.5 * (var.log() + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _F._reduce(loss, reduction)


# ---- CTC ------------------------------------------------------------------------------------

def _lse(*xs):
    """logsumexp of same-shaped arrays, -inf where all are -inf (no warnings, no nan)."""
    m = np.maximum.reduce(xs)
    safe = np.where(np.isfinite(m), m, 0)
    with np.errstate(divide="ignore"):
        return np.log(sum(np.exp(x - safe) for x in xs)) + safe


def _shift(a, k, axis=-1):
    """``a`` moved ``k`` places right along the last axis, -inf filled (alpha[s - k])."""
    out = np.full_like(a, -np.inf)
    if k > 0:
        out[..., k:] = a[..., :-k]
    else:
        out[..., :k] = a[..., -k:]
    return out


def _ctc_tables(targets, target_lengths, blank):
    """Extended labels l' (blank-interleaved, (N, 2S+1)), their validity, and where the
    skip transition s-2 -> s is allowed (l'[s] not blank and != l'[s-2])."""
    n, s = targets.shape
    ext = np.full((n, 2 * s + 1), blank, dtype=np.int64)
    ext[:, 1::2] = targets
    pos = np.arange(2 * s + 1)
    valid = pos[None] < 2 * target_lengths[:, None] + 1
    skip = np.zeros_like(valid)
    skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])
    return ext, valid, skip


class _CTC(Function):
    """Per-sample CTC negative log-likelihood of (T, N, C) log-probs; backward is torch's
    ``exp(lp) - exp(log(alpha beta) + nll - lp)`` (the gradient through a log_softmax, which
    torch's kernel returns for the log-probs themselves)."""

    @staticmethod
    def forward(ctx, log_probs, targets, input_lengths, target_lengths, blank, zero_infinity):
        lp = log_probs.detach().numpy().astype(np.float64)
        ext, valid, skip = _ctc_tables(targets, target_lengths, blank)
        T, N = lp.shape[:2]
        # (T, N, S') log-probs of each extended label
        lpe = np.take_along_axis(lp, np.broadcast_to(ext[None], (T,) + ext.shape), 2)
        alpha = np.full(lpe.shape, -np.inf)
        alpha[0, :, :2] = lpe[0, :, :2]
        alpha[0] = np.where(valid, alpha[0], -np.inf)
        for t in range(1, T):
            a = alpha[t - 1]
            alpha[t] = np.where(valid, _lse(a, _shift(a, 1), np.where(skip, _shift(a, 2), -np.inf))
                                + lpe[t], -np.inf)
        last = alpha[input_lengths - 1, np.arange(N)]             # (N, S')
        end = 2 * target_lengths
        nll = -_lse(last[np.arange(N), end], np.where(
            end > 0, last[np.arange(N), np.maximum(end - 1, 0)], -np.inf))
        ctx.state = (lp, lpe, alpha, nll, ext, valid, skip, input_lengths, end, zero_infinity)
        ctx.meta = (log_probs.dtype, log_probs.device)
        out = np.where(zero_infinity & np.isinf(nll), 0.0, nll)
        return ember.tensor(out, dtype=log_probs.dtype, device=log_probs.device)

    @staticmethod
    def backward(ctx, g):
        lp, lpe, alpha, nll, ext, valid, skip, lens, end, zero_inf = ctx.state
        T, N, C = lp.shape
        n = np.arange(N)
        beta = np.full(lpe.shape, -np.inf)
        skip_next = np.zeros_like(skip)
        skip_next[:, :-2] = skip[:, 2:]          # from s, may jump to s + 2
        for t in range(T - 1, -1, -1):
            init = np.full(lpe.shape[1:], -np.inf)      # beta at each sample's last step
            init[n, end] = lpe[t, n, end]
            init[n[end > 0], end[end > 0] - 1] = lpe[t, n[end > 0], end[end > 0] - 1]
            if t + 1 < T:
                b = beta[t + 1]
                rec = _lse(b, _shift(b, -1), np.where(skip_next, _shift(b, -2), -np.inf)) + lpe[t]
            else:
                rec = init
            live = valid & (t < lens)[:, None]
            beta[t] = np.where(live, np.where((t == lens - 1)[:, None], init, rec), -np.inf)
        ab = alpha + beta                                      # (T, N, S')
        m = ab.max(2, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)
        onehot = ext[:, :, None] == np.arange(C)               # (N, S', C)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            lcab = np.log(np.einsum("tns,nsc->tnc", np.exp(ab - m), onehot)) + m
            grad = np.exp(lp) - np.exp(lcab + nll[None, :, None] - lp)
        grad = np.where((np.arange(T)[:, None] < lens[None])[..., None], grad, 0.0)
        if zero_inf:
            grad = np.where(np.isinf(nll)[None, :, None], 0.0, grad)
        dtype, device = ctx.meta
        grad = ember.tensor(grad, dtype=dtype, device=device)
        return grad * g.reshape(1, N, 1), None, None, None, None, None


def _as_lengths(x, name):
    a = x.detach().cpu().numpy() if isinstance(x, ember.Tensor) else np.asarray(x)
    return a.astype(np.int64).reshape(-1)


@autocast_policy("autocast_fp32")
def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
             zero_infinity=False):
    """Connectionist Temporal Classification loss of (T, N, C) log-probabilities (or
    unbatched (T, C)) against targets padded (N, S) or concatenated (sum(target_lengths),).

    The alignment sum runs in log space (alpha-beta recursion); ``mean`` divides each loss by
    its target length, then averages over the batch.

    Example:
        >>> import ember
        >>> lp = ember.full((2, 1, 2), 0.5).log()
        >>> F = ember.nn.functional
        >>> round(F.ctc_loss(lp, ember.tensor([[1]]), [2], [1], reduction="sum").item(), 4)
        0.2877
    """
    reduction = _reduction(None, None, reduction)
    unbatched = log_probs.dim() == 2
    if unbatched:
        log_probs, targets = log_probs.unsqueeze(1), targets.unsqueeze(0)
    T, N, C = log_probs.shape
    il, tl = _as_lengths(input_lengths, "input"), _as_lengths(target_lengths, "target")
    if not 0 <= blank < C:
        raise RuntimeError("blank must be in label range")
    if il.shape[0] != N:
        raise RuntimeError("input_lengths must be of size batch_size")
    if tl.shape[0] != N:
        raise RuntimeError("target_lengths must be of size batch_size")
    tg = targets.detach().cpu().numpy().astype(np.int64)
    if tg.ndim == 1:                          # concatenated targets: pad them to (N, max)
        starts = np.concatenate([[0], np.cumsum(tl)[:-1]])
        pad = np.zeros((N, max(int(tl.max(initial=0)), 1)), np.int64)
        for i, (s, k) in enumerate(zip(starts, tl)):
            pad[i, :k] = tg[s:s + k]
        tg = pad
    elif tg.shape[1] < tl.max(initial=0):
        raise RuntimeError(f"Expected tensor to have size at least {tl.max()} at dimension 1, "
                           f"but got size {tg.shape[1]} for argument #2 'targets' (while "
                           "checking arguments for ctc_loss_cpu)")
    for i in range(N):
        if il[i] > T or il[i] < 0:
            raise RuntimeError(f"Expected input_lengths to have value at most {T}, but got "
                               f"value {il[i]} (while checking arguments for ctc_loss_cpu)")
    loss = _CTC.apply(log_probs, tg, il, tl, blank, zero_infinity)
    if reduction == "mean":
        div = ember.tensor(np.maximum(tl, 1), dtype=loss.dtype, device=loss.device)
        return (loss / div).mean()
    if reduction == "sum":
        return loss.sum()
    return loss[0] if unbatched else loss


# ---- margin losses --------------------------------------------------------------------------

@autocast_policy("autocast_fp32")
def margin_ranking_loss(input1, input2, target, margin=0, size_average=None, reduce=None,
                        reduction="mean"):
    """``max(0, -y (x1 - x2) + margin)``.

    Example:
        >>> import ember
        >>> F = ember.nn.functional
        >>> F.margin_ranking_loss(ember.tensor([1.0]), ember.tensor([2.0]), ember.tensor([1.0]))
        tensor(1.)
    """
    reduction = _reduction(size_average, reduce, reduction)
    if input1.dim() != input2.dim() or input1.dim() != target.dim():
        raise RuntimeError(f"margin_ranking_loss : All input tensors should have same dimension "
                           f"but got sizes: input1: {input1.size()}, input2: {input2.size()}, "
                           f"target: {target.size()} ")
    return _F._reduce((-target * (input1 - input2) + margin).clamp_min(0), reduction)


@autocast_policy("autocast_fp32")
def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None,
                         reduction="mean"):
    """``x`` where ``y == 1``, ``max(0, margin - x)`` where ``y == -1``.

    Example:
        >>> import ember
        >>> F = ember.nn.functional
        >>> F.hinge_embedding_loss(ember.tensor([0.3, 2.0]), ember.tensor([-1.0, 1.0]))
        tensor(1.3500)
    """
    reduction = _reduction(size_average, reduce, reduction)
    # NOTE: torch's two where()s: a target that is neither 1 nor -1 gets both terms.
    loss = ember.where(target != 1, (margin - input).clamp_min(0), 0.0) + \
        ember.where(target != -1, input, 0.0)
    return _F._reduce(loss, reduction)


@autocast_policy("autocast_fp32")
@recorded_as("SoftMarginLossBackward0")
def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """``log(1 + exp(-y x))``, the two-class logistic loss.

    Example:
        >>> import ember
        >>> F = ember.nn.functional
        >>> round(F.soft_margin_loss(ember.zeros(2), ember.ones(2)).item(), 4)
        0.6931
    """
    reduction = _reduction(size_average, reduce, reduction)
    return _F._reduce(ember.log1p(ember.exp(-input * target)), reduction)


def _as_batch(input, target, name, target_shape):
    """(C,) or (N, C) input and its target, batched (an unbatched target as ``target_shape``)."""
    if input.dim() > 2 or input.dim() == 0 or input.numel() == 0 and input.dim() == 1:
        raise RuntimeError(f"{name}: Expected non-empty vector or matrix with optional 0-dim "
                           f"batch size, but got: {list(input.shape)}")
    return (input.unsqueeze(0), target.reshape(target_shape)) if input.dim() == 1 else \
        (input, target)


def _per_sample(loss, reduction, unbatched, shape=()):
    return loss.reshape(shape) if reduction == "none" and unbatched else _F._reduce(loss, reduction)


@autocast_policy("autocast_fp32")
@recorded_as("MultiMarginLossBackward0")
def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None,
                      reduce=None, reduction="mean"):
    """Multi-class hinge loss: ``sum_{i != y} w[y] max(0, margin - x[y] + x[i])^p / C``.

    Example:
        >>> import ember
        >>> F = ember.nn.functional
        >>> F.multi_margin_loss(ember.tensor([[0.1, 0.2, 0.4, 0.8]]), ember.tensor([3]))
        tensor(0.3250)
    """
    reduction = _reduction(size_average, reduce, reduction)
    if p != 1 and p != 2:
        raise ValueError("only p == 1 and p == 2 supported")
    if weight is not None and weight.dim() != 1:
        raise ValueError("weight must be one-dimensional")
    x, t = _as_batch(input, target, "multi_margin_loss", (-1,))
    n, c = x.shape
    if tuple(t.shape) != (n,):
        raise RuntimeError(f"multi_margin_loss: target tensor should be 1-D with size equal to the "
                           f"number of input samples (batch size). Expected target size [{n}], but "
                           f"got {list(target.shape)}. Input has shape {list(input.shape)}.")
    if weight is not None and weight.numel() != c:
        raise RuntimeError(f"inconsistent weight size, expected {c} but got {list(weight.shape)}")
    if n and (int(t.min()) < 0 or int(t.max()) >= c):
        raise RuntimeError("target out of range")
    others = t.unsqueeze(1) != ember.arange(c, device=x.device)
    z = (margin - x.gather(1, t.unsqueeze(1)) + x).clamp_min(0)
    h = ember.where(others, z if p == 1 else z * z, 0.0)
    if weight is not None:
        h = h * weight[t].unsqueeze(1)
    return _per_sample(h.sum(1) / c, reduction, input.dim() == 1, tuple(target.shape))


@autocast_policy("autocast_fp32")
@recorded_as("MultilabelMarginLossBackward0")
def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Multi-label hinge loss: each row of ``target`` lists class indices, ended by -1;
    ``sum_{j in targets} sum_{i not in targets} max(0, 1 - (x[j] - x[i])) / C``.

    Example:
        >>> import ember
        >>> F = ember.nn.functional
        >>> F.multilabel_margin_loss(ember.tensor([[0.1, 0.2, 0.4, 0.8]]),
        ...                          ember.tensor([[3, 0, -1, 1]]))
        tensor(0.8500)
    """
    reduction = _reduction(size_average, reduce, reduction)
    x, t = _as_batch(input, target, "multilabel_margin_loss", (1, -1))
    if tuple(t.shape) != tuple(x.shape):
        raise RuntimeError(f"inconsistent target size: {list(target.shape)} for input of size: "
                           f"{list(input.shape)}")
    n, c = x.shape
    tn = t.detach().cpu().numpy()
    if tn.size and (tn.min() < -1 or tn.max() >= c):
        raise RuntimeError("target out of range")
    # slots before the first -1 hold targets; a class listed there is not a negative
    valid = np.cumprod(tn >= 0, axis=1).astype(bool)
    safe = np.where(valid, tn, 0)
    is_target = np.zeros((n, c), bool)
    rows, slots = np.nonzero(valid)
    is_target[rows, safe[rows, slots]] = True
    xt = x.gather(1, ember.tensor(safe, device=x.device))                    # (N, S)
    z = (1 - xt.unsqueeze(2) + x.unsqueeze(1)).clamp_min(0)                   # (N, S, C)
    keep = ember.tensor(valid[:, :, None] & ~is_target[:, None, :], device=x.device)
    return _per_sample(ember.where(keep, z, 0.0).sum((1, 2)) / c, reduction, input.dim() == 1)


@autocast_policy("autocast_fp32")
def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,
                                reduction="mean"):
    """Per-class logistic loss averaged over the classes (last dim).

    Example:
        >>> import ember
        >>> F = ember.nn.functional
        >>> round(F.multilabel_soft_margin_loss(ember.zeros(1, 3), ember.ones(1, 3)).item(), 4)
        0.6931
    """
    reduction = _reduction(size_average, reduce, reduction, msg=f"{reduction} is not valid")
    loss = -(target * _F.logsigmoid(input) + (1 - target) * _F.logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    return _F._reduce(loss.sum(input.dim() - 1) / input.shape[-1], reduction)


@autocast_policy("autocast_fp32")
def cosine_embedding_loss(input1, input2, target, margin=0, size_average=None, reduce=None,
                          reduction="mean"):
    """``1 - cos(x1, x2)`` where ``y == 1``, ``max(0, cos(x1, x2) - margin)`` where ``y == -1``.

    Example:
        >>> import ember
        >>> F = ember.nn.functional
        >>> F.cosine_embedding_loss(ember.tensor([[1.0, 0.0]]), ember.tensor([[0.0, 1.0]]),
        ...                         ember.tensor([1]))
        tensor(1.)
    """
    reduction = _reduction(size_average, reduce, reduction)
    d = target.dim()
    if d > 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    if input1.dim() != d + 1 or input2.dim() != d + 1:
        raise RuntimeError(f"{d}D target tensor expects {d + 1}D input tensors, but found inputs "
                           f"with sizes {list(input1.shape)} and {list(input2.shape)}.")
    eps = 1e-12                        # NOTE: torch's EPSILON, added to each squared norm
    cos = (input1 * input2).sum(d) / (((input1 * input1).sum(d) + eps) *
                                      ((input2 * input2).sum(d) + eps)).sqrt()
    loss = ember.where(target == 1, 1 - cos, 0.0) + \
        ember.where(target == -1, (cos - margin).clamp_min(0), 0.0)
    return _F._reduce(loss, reduction)


def _triplet(anchor, positive, negative, distance, margin, swap, reduction):
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    dims = (anchor.dim(), positive.dim(), negative.dim())
    if len(set(dims)) != 1:
        raise RuntimeError("The anchor, positive, and negative tensors are expected to have the "
                           "same number of dimensions, but got: anchor {}D, positive {}D, and "
                           "negative {}D inputs".format(*dims))
    d_pos, d_neg = distance(anchor, positive), distance(anchor, negative)
    if swap:
        d_neg = ember.minimum(d_neg, distance(positive, negative))
    return _F._reduce((margin + d_pos - d_neg).clamp_min(0), reduction)


@autocast_policy("autocast_fp32")
def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False,
                        size_average=None, reduce=None, reduction="mean"):
    """``max(0, margin + d(a, p) - d(a, n))`` with ``d`` the p-norm pairwise distance.

    Example:
        >>> import ember
        >>> F = ember.nn.functional
        >>> a = ember.zeros(1, 2)
        >>> F.triplet_margin_loss(a, a, a + 3, eps=0.0)
        tensor(0.)
    """
    reduction = _reduction(size_average, reduce, reduction)
    return _triplet(anchor, positive, negative,
                    lambda x, y: pairwise_distance(x, y, p, eps), margin, swap, reduction)


@autocast_policy("autocast_fp32")
def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None,
                                      margin=1.0, swap=False, reduction="mean"):
    """Triplet loss with any ``distance_function(x, y)`` (pairwise_distance by default).

    Example:
        >>> import ember
        >>> F = ember.nn.functional
        >>> a = ember.zeros(1, 2)
        >>> F.triplet_margin_with_distance_loss(a, a, a + 3, distance_function=lambda x, y:
        ...                                     (x - y).abs().sum(-1), margin=7.0)
        tensor(1.)
    """
    reduction = _reduction(None, None, reduction)
    return _triplet(anchor, positive, negative, distance_function or pairwise_distance, margin,
                    swap, reduction)


def linear_cross_entropy(input, linear_weight, target, *, linear_bias=None, weight=None,
                         reduction="mean", ignore_index=None, label_smoothing=0.0, options=None):
    """``cross_entropy(linear(input, linear_weight, linear_bias), target, ...)``; a weight of
    shape (C, d1, ..., dK, in_features) gives K-dimensional logits (N, C, d1, ..., dK).
    ``options`` (torch's chunking strategy) is accepted; ember computes the reference path.

    Example:
        >>> F = ember.nn.functional
        >>> round(F.linear_cross_entropy(ember.ones(2, 3), ember.zeros(4, 3),
        ...                              ember.tensor([0, 1])).item(), 4)
        1.3863
    """
    w = linear_weight
    logits = _F.linear(input, w.reshape(-1, w.shape[-1]),
                       None if linear_bias is None else linear_bias.reshape(-1))
    if w.dim() > 2:
        logits = logits.reshape(tuple(input.shape[:-1]) + tuple(w.shape[:-1]))
    return _F.cross_entropy(logits, target, weight,
                            ignore_index=-100 if ignore_index is None else ignore_index,
                            reduction=reduction, label_smoothing=label_smoothing)
