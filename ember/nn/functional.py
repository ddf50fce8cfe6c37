"""``torch.nn.functional``: activations, linear layers, losses, dropout, normalization.

Fused ops with their own backward live in ember/_ops: linear, softmax, log_softmax in nn.py,
losses in losses.py, activations in activations.py, norms in normalization.py; the rest are compositions of ember ops, so autograd needs no new
rules.
"""
import math
import sys
import warnings

import ember

from .._ops import activations as _acts, losses as _losses, nn as _nn, nn_rows as _rows
from . import _attention
from .._ops.dispatch import dispatch, dispatch_inplace
from ..amp.autocast_mode import autocast_policy
from ..autograd.composite import one_node, recorded_as
from ..autograd.graph import rename_node

_E = {}


def linear(input, weight, bias=None):
    """``input @ weight.T + bias``.

    Example:
        >>> import ember
        >>> ember.nn.functional.linear(ember.ones(2, 3), ember.ones(4, 3)).shape
        torch.Size([2, 4])
    """
    return dispatch(_nn.linear, (input, weight, bias), _E)


@autocast_policy("autocast_keep_cpu", "autocast_promote_cuda")
def bilinear(input1, input2, weight, bias=None):
    """``x1^T A x2 + b`` for each output feature (weight is (out, in1, in2))."""
    # (..., 1, 1, i) @ (o, i, j) -> (..., o, 1, j); then contract j with input2
    out = ((input1.unsqueeze(-2).unsqueeze(-2) @ weight).squeeze(-2) * input2.unsqueeze(-2)).sum(-1)
    return out + bias if bias is not None else out


# ---- activations --------------------------------------------------------------------------

def _inplace(input, result, inplace):
    return input.copy_(result) if inplace else result


def relu(input, inplace=False):
    """``max(x, 0)``."""
    return input.relu_() if inplace else input.relu()


def relu6(input, inplace=False):
    return hardtanh(input, 0.0, 6.0, inplace)


# torch's node of an activation's in-place form, where it is not the out-of-place one's
_INPLACE_NODE = {"leaky_relu": "LeakyReluBackward1", "elu": "EluBackward1",
                 "celu": "CeluBackward1", "threshold": "ThresholdBackward1"}


def _act(opdef, input, inplace, *options):
    if not inplace:
        return dispatch(opdef, (input,) + options, _E)
    before = input.grad_fn
    out = dispatch_inplace(opdef, input, options, _E)
    if out.grad_fn is not before:       # (a node recorded by this call: not under no_grad)
        rename_node(out.grad_fn, _INPLACE_NODE.get(opdef.name))
    return out


def leaky_relu(input, negative_slope=0.01, inplace=False):
    return _act(_acts.leaky_relu, input, inplace, negative_slope)


def elu(input, alpha=1.0, inplace=False):
    return _act(_acts.elu, input, inplace, alpha)


def selu(input, inplace=False):
    # NOTE: torch's selu is an elu with a scale (its node is EluBackward0)
    return _act(_acts.elu, input, inplace, 1.6732632423543772848170429916717,
                1.0507009873554804934193349852946)


def celu(input, alpha=1.0, inplace=False):
    return _act(_acts.celu, input, inplace, alpha)


def gelu(input, approximate="none"):
    """Gaussian error linear unit: exact (erf) or the ``"tanh"`` approximation.

    Example:
        >>> import ember
        >>> ember.nn.functional.gelu(ember.tensor([-1.0, 0.0, 1.0]))
        tensor([-0.1587,  0.0000,  0.8413])
    """
    return dispatch(_rows.gelu, (input, approximate), _E)


def silu(input, inplace=False):
    return _act(_acts.silu, input, inplace)


def mish(input, inplace=False):
    return _act(_acts.mish, input, inplace)


@autocast_policy("autocast_fp32_cuda")
def softplus(input, beta=1.0, threshold=20.0):
    """``log(1 + exp(beta x)) / beta``, the identity where ``beta x > threshold``."""
    return dispatch(_acts.softplus, (input, beta, threshold), _E)


def softsign(input):
    return input / (1 + input.abs())


def softshrink(input, lambd=0.5):
    return dispatch(_acts.softshrink, (input, lambd), _E)


def hardshrink(input, lambd=0.5):
    return dispatch(_acts.hardshrink, (input, lambd), _E)


def tanhshrink(input):
    return input - input.tanh()


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    return _act(_acts.hardtanh, input, inplace, min_val, max_val)


def hardsigmoid(input, inplace=False):
    return _act(_acts.hardsigmoid, input, inplace)


def hardswish(input, inplace=False):
    return _act(_acts.hardswish, input, inplace)


def logsigmoid(input):
    """``log(sigmoid(x))`` computed stably."""
    return dispatch(_acts.logsigmoid, (input,), _E)


def sigmoid(input):
    return input.sigmoid()


def tanh(input):
    return input.tanh()


def threshold(input, threshold, value, inplace=False):
    return _act(_acts.threshold, input, inplace, threshold, value)


def _glu(input, dim):
    a, b = input.chunk(2, dim)
    return a * b.sigmoid()


def glu(input, dim=-1):
    """``a * sigmoid(b)``, ``a`` and ``b`` the halves of ``input`` along ``dim``."""
    return one_node("GluBackward0", _glu, input, dim)


def _prelu(input, weight):
    return ember.where(input > 0, input, weight * input)


@autocast_policy("autocast_lower")
def prelu(input, weight):
    """``x`` where positive, else ``weight * x`` (one weight, or one per channel)."""
    channels = input.shape[1] if input.dim() >= 2 else 1
    if weight.numel() not in (1, channels):
        raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found "
                           f"parameter numbers = {weight.numel()} and channel size = {channels}.")
    if input.dim() >= 2:
        weight = weight.reshape((1, weight.numel()) + (1,) * (input.dim() - 2))
    return one_node("PreluKernelBackward0", _prelu, input, weight)


def _rrelu(input, lower, upper, training):
    if not training:
        return dispatch(_acts.leaky_relu, (input, (lower + upper) / 2), _E)
    # NOTE: as torch's CPU kernel, only elements <= 0 draw a slope, in order: a double uniform
    # scaled unfused (that kernel is built without FMA) to the bounds rounded to the input's
    # (float's, for half) precision, then rounded to that precision
    neg, acc = input.detach() <= 0, ember.float64 if input.dtype == ember.float64 else ember.float32
    lo, up = (float(ember.tensor(v, dtype=acc)) for v in (lower, upper))
    noise = ember.ones_like(input.detach())
    noise[neg] = (ember.rand(int(neg.sum()), dtype=ember.float64, device=input.device) * (
        up - lo) + lo).to(acc).to(input.dtype)
    return input * noise


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """Leaky ReLU with a random slope in [lower, upper) per element while training, their
    mean otherwise."""
    if not inplace:
        return one_node("RreluWithNoiseBackward0", _rrelu, input, lower, upper, training)
    graph = input.requires_grad and ember.is_grad_enabled()
    if graph and input.grad_fn is None:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                           "operation.")
    # NOTE: torch's in-place form is a node of its own; it reads a copy of what it overwrites
    r = one_node("RreluWithNoiseBackward1", _rrelu, input._alias_copy() if graph else input,
                 lower, upper, training)
    return input._assign(r, name="rrelu_")


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    """``exp(x_i) / sum_j exp(x_j)`` along ``dim``."""
    return dispatch(_nn.softmax, (input, _dim(input, dim), dtype), _E)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    return dispatch(_nn.log_softmax, (input, _dim(input, dim), dtype), _E)


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    return softmax(-input, dim, dtype=dtype)


def _dim(input, dim):
    if dim is None:
        # NOTE: torch's legacy implicit dim choice (with a warning there).
        dim = 0 if input.dim() in (0, 1, 3) else 1
    return dim


# ---- dropout -------------------------------------------------------------------------------

def dropout(input, p=0.5, training=True, inplace=False):
    """Zero each element with probability ``p`` and scale the rest by ``1/(1-p)``."""
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0:
        return input
    if p == 1:
        return _inplace(input, input * 0, inplace)
    # NOTE: as torch, the mask is scaled first: the output is one mul of the input (one node)
    keep = _keep(tuple(input.shape), input, p) / (1 - p)
    return _inplace(input, input * keep, inplace)


def _keep(shape, input, p):
    """Dropout's mask as torch draws it, ``bernoulli_(1 - p)``: a double uniform below 1 - p
    (torch's numbers for the same seed), drawn by a factory, which vmap batches."""
    return (ember.rand(shape, dtype=ember.float64, device=input.device) < 1 - p).to(input.dtype)


def _feature_dropout(input, p, training, inplace, batched_dims):
    if not training or p == 0:
        return input
    shape = tuple(input.shape[:batched_dims]) + (1,) * (input.dim() - batched_dims)
    keep = _keep(shape, input, p)
    return _inplace(input, input * (keep / (1 - p)) if p < 1 else input * 0, inplace)


def dropout1d(input, p=0.5, training=True, inplace=False):
    return _feature_dropout(input, p, training, inplace, input.dim() - 1)


def dropout2d(input, p=0.5, training=True, inplace=False):
    return _feature_dropout(input, p, training, inplace, input.dim() - 2)


def dropout3d(input, p=0.5, training=True, inplace=False):
    return _feature_dropout(input, p, training, inplace, input.dim() - 3)


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    return _alpha_dropout(input, p, training, inplace, tuple(input.shape))


def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Alpha dropout of whole channels (dim 1): a dropped channel takes SELU's saturation
    value everywhere, then the affine map keeps mean 0 and variance 1."""
    return _alpha_dropout(input, p, training, inplace,
                          tuple(input.shape[:2]) + (1,) * (input.dim() - 2))


def _alpha_dropout(input, p, training, inplace, mask_shape):
    if not training or p == 0:
        return input
    alpha = -1.7580993408473766
    keep = _keep(mask_shape, input, p)
    a = (1 / math.sqrt((alpha ** 2 * p + 1) * (1 - p)))
    b = -a * alpha * p
    return _inplace(input, a * (input * keep + alpha * (1 - keep)) + b, inplace)


def gumbel_softmax(logits, tau=1.0, hard=False, eps=1e-10, dim=-1):
    """Samples of the Gumbel-softmax distribution: ``softmax((logits + g) / tau)`` with Gumbel
    noise ``g``; ``hard`` returns one-hot vectors with the soft sample's gradient
    (straight-through)."""
    gumbels = -ember.empty_like(logits).exponential_().log()
    y = ((logits + gumbels) / tau).softmax(dim)
    if not hard:
        return y
    index = y.argmax(dim, keepdim=True)
    y_hard = ember.zeros_like(logits).scatter_(dim, index, 1.0)
    return y_hard - y.detach() + y


@recorded_as("PdistBackward0")
def pdist(input, p=2):
    """The ``p``-norm distances between each pair of rows of an (N, M) input, as the
    N * (N - 1) / 2 entries above the diagonal of ``cdist(input, input)``, row by row.

    Example:
        >>> ember.nn.functional.pdist(ember.tensor([[0., 0.], [3., 4.], [6., 8.]]))
        tensor([ 5., 10.,  5.])
    """
    if input.dim() != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.dim()}D")
    if p < 0:
        raise RuntimeError("pdist only supports non-negative p values")
    i, j = ember.triu_indices(input.shape[0], input.shape[0], 1, device=input.device)
    diff = (input[i] - input[j]).abs()
    if p == 0:
        return (diff != 0).to(input.dtype).sum(-1)
    if p == math.inf:
        return diff.amax(-1) if diff.shape[0] else diff.sum(-1)
    return diff.pow(p).sum(-1).pow(1.0 / p)


# ---- normalization, embedding ----------------------------------------------------------------

def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalize over the last ``len(normalized_shape)`` dims, then scale and shift.

    Example:
        >>> import ember
        >>> ember.nn.functional.layer_norm(ember.tensor([[1.0, 3.0]]), (2,))
        tensor([[-1.0000,  1.0000]])
    """
    return dispatch(_rows.layer_norm, (input, normalized_shape, weight, bias, eps), _E)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """Divide by the root mean square over the last ``len(normalized_shape)`` dims, then scale.

    Example:
        >>> import ember
        >>> ember.nn.functional.rms_norm(ember.tensor([[3.0, 4.0]]), (2,))
        tensor([[0.8485, 1.1314]])
    """
    return dispatch(_rows.rms_norm, (input, normalized_shape, weight, eps), _E)


def one_hot(tensor, num_classes=-1):
    """int64 one-hot encoding with ``num_classes`` (max + 1 by default)."""
    if tensor.dtype is not ember.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    n = int(tensor.max().item()) + 1 if num_classes == -1 else num_classes
    return (tensor.unsqueeze(-1) == ember.arange(n, device=tensor.device)).long()


# ---- losses -----------------------------------------------------------------------------------

def _reduce(loss, reduction):
    reduction = _checked(reduction)
    return loss.mean() if reduction == "mean" else loss.sum() if reduction == "sum" else loss


def _checked(reduction):
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def _legacy(size_average, reduce, reduction):
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    return "none" if not reduce else "mean" if size_average else "sum"


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """Negative log-likelihood loss over log-probabilities ``input``."""
    reduction = _legacy(size_average, reduce, reduction)
    return dispatch(_losses.nll_loss, (input, target, weight, ignore_index, reduction), _E)


@autocast_policy("autocast_fp32")
def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    """Cross entropy of logits ``input`` against class indices or class probabilities.

    Example:
        >>> import ember
        >>> F = ember.nn.functional
        >>> round(F.cross_entropy(ember.zeros(2, 4), ember.tensor([0, 3])).item(), 4)
        1.3863
    """
    reduction = _legacy(size_average, reduce, reduction)
    if label_smoothing > 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing:g}")
    # NOTE: torch checks only the upper bound, and smooths only when the value is positive: a
    # negative one is accepted and does nothing
    label_smoothing = max(label_smoothing, 0.0)
    if not target.dtype.is_floating_point and weight is None:
        return dispatch(_rows.cross_entropy_loss, (input, target, ignore_index, reduction,
                                                   label_smoothing), _E)
    logp = log_softmax(input, 1 if input.dim() > 1 else 0)
    if target.dtype.is_floating_point:           # class probabilities
        if tuple(target.shape) != tuple(input.shape):
            raise RuntimeError(f"Expected target size {list(input.shape[:1] + input.shape[2:])}"
                               f", got {list(target.shape)}")
        c = 1 if input.dim() > 1 else 0
        if label_smoothing > 0:
            target = target * (1 - label_smoothing) + label_smoothing / input.shape[c]
        # NOTE: torch's formula, so its graph: the mean is a sum divided by a number
        loss = logp * target
        if weight is not None:
            loss = loss * weight.reshape((-1,) + (1,) * (input.dim() - 2))
        if reduction == "none":
            return -loss.sum(c)
        if reduction == "sum":
            return -loss.sum()
        n = input.numel() / input.shape[c] if input.dim() > 1 else 1
        return one_node("DivBackward1", lambda t: t / n, -loss.sum())
    nll = nll_loss(logp, target, weight, ignore_index=ignore_index, reduction=reduction)
    if label_smoothing == 0:
        return nll
    c = input.shape[1 if input.dim() > 1 else 0]
    w = 1 if weight is None else weight.reshape((-1,) + (1,) * (input.dim() - 2))
    valid = (target != ignore_index).to(input.dtype)
    smooth = -(logp * w).sum(1 if input.dim() > 1 else 0) * valid
    if reduction == "mean":
        denom = valid.sum() if weight is None else (weight[ember.where(
            target != ignore_index, target, 0)] * valid).sum()
        # NOTE: every target ignored: the loss is 0 / 0 = nan, as in torch, but the gradient
        # 0 (not 0 * inf): the division is by 1, and the nan an added constant
        empty = denom == 0
        smooth = smooth.sum() / (denom + empty) + ember.where(empty, math.nan, 0.0)
    else:
        smooth = _reduce(smooth, reduction)
    return (1 - label_smoothing) * nll + label_smoothing / c * smooth


@autocast_policy("autocast_fp32")
def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    reduction = _checked(_legacy(size_average, reduce, reduction))
    if weight is None:
        return dispatch(_losses.mse_loss, (input, target, reduction), _E)
    # NOTE: as torch, a weighted loss is composed (its node is the reduction's, not MseLoss's)
    if tuple(weight.shape) != tuple(input.shape):
        raise ValueError("Weights and input must have the same size.")
    loss = (input - target).pow(2) * weight
    if reduction == "none":
        return loss
    return loss.sum() / weight.sum() if reduction == "mean" else loss.sum()


@autocast_policy("autocast_fp32")
def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    return _reduce((input - target).abs(), _legacy(size_average, reduce, reduction))


@autocast_policy("autocast_fp32")
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    reduction = _checked(_legacy(size_average, reduce, reduction))
    if beta == 0:       # NOTE: torch's is then l1_loss (its node the mean's)
        return l1_loss(input, target, reduction=reduction)
    return dispatch(_losses.smooth_l1_loss, (input, target, reduction, beta), _E)


@autocast_policy("autocast_fp32")
def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    if weight is None:
        return dispatch(_losses.huber_loss, (input, target, _checked(reduction), delta), _E)
    if tuple(weight.shape) != tuple(input.shape):
        raise ValueError("Weights and input must have the same size.")
    return _reduce(dispatch(_losses.huber_loss, (input, target, "none", delta), _E) * weight,
                   reduction)


@autocast_policy("autocast_fp32_cpu", "autocast_banned_cuda")
def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """BCE on probabilities; like torch, each log term is clamped at -100."""
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Using a target size ({target.shape}) that is different to the input "
                         f"size ({input.shape}) is deprecated. Please ensure they have the same "
                         "size.")
    return dispatch(_losses.binary_cross_entropy, (input, target, weight, _checked(
        _legacy(size_average, reduce, reduction))), _E)


@autocast_policy("autocast_fp32")
def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction="mean", pos_weight=None):
    """BCE on logits, computed stably: ``(1 - y) x + (1 + (pw - 1) y) softplus(-x)``."""
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Target size ({target.shape}) must be the same as input size "
                         f"({input.shape})")
    return dispatch(_losses.binary_cross_entropy_with_logits, (input, target, weight, pos_weight,
                    _checked(_legacy(size_average, reduce, reduction))), _E)


@autocast_policy("autocast_fp32")
def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    loss = target.exp() * (target - input) if log_target else \
        ember.xlogy(target, target) - target * input
    reduction = _legacy(size_average, reduce, reduction)
    if reduction == "mean":
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the "
                      "support size.'batchmean' divides only by the batch size, and aligns with "
                      "the KL div math definition.'mean' will be changed to behave the same as "
                      "'batchmean' in the next major release.", UserWarning, stacklevel=3)
    return loss.sum() / input.shape[0] if reduction == "batchmean" else _reduce(loss, reduction)


# ---- attention --------------------------------------------------------------------------------

@autocast_policy("autocast_lower")
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """``softmax(q k^T * scale + mask) v`` over the last two dims; a bool mask keeps True
    positions, a float mask is added.

    Example:
        >>> import ember
        >>> q = ember.ones(2, 4, 8)
        >>> ember.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).shape
        torch.Size([2, 4, 8])
    """
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be "
                           "set when is_causal=True")
    flash = _attention.use_flash(query, key, value, attn_mask, dropout_p, enable_gqa)
    node = _sdpa_node(query, key, value, attn_mask, dropout_p)
    sdp = sys.modules.get("ember.backends")     # its flags change only once it is imported
    if node is not None and sdp is not None and not (sdp._sdp["flash"] and sdp._sdp["math"]):
        node, flash = _sdpa_backend(sdp._sdp, node, query, value, flash)
    if node is None or not flash and node == _MATMUL_NODE[query.dim() >= 3]:
        return _sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, flash)
    return one_node(node, _sdpa, query, key, value, attn_mask, dropout_p, is_causal, scale,
                    enable_gqa, flash)


_MATMUL_NODE = {False: "MmBackward0", True: "UnsafeViewBackward0"}


def _sdpa_backend(sdp, node, query, value, flash):
    """torch's choice of cpu kernel under nn.attention.sdpa_kernel: its flash kernel where
    enabled and applicable, else the math path (ember's naive one) where enabled."""
    if not (sdp["flash"] or sdp["math"]):
        raise RuntimeError("No viable backend for scaled_dot_product_attention was found. This is "
                           "likely due to turning off both the math kernel and the fused kernels.")
    if node.startswith("ScaledDot") and sdp["flash"]:
        return node, flash
    if not sdp["math"]:
        warnings.warn("Flash attention kernel not used because: its requirements (4-d "
                      "operands of one batch and head size, no dropout) are not met")
        raise RuntimeError("No available kernel.  Aborting execution.")
    return _MATMUL_NODE[max(query.dim(), value.dim()) >= 3], False


def _sdpa_node(query, key, value, attn_mask, dropout_p):
    """torch's node of an attention on the cpu: its flash kernel's where it runs that one
    (4-d operands of one batch and head size, no dropout, no mask needing a gradient), else
    that of the math path's last matmul. None off the cpu."""
    if query.device.type != "cpu":
        return None
    qkv = (query, key, value)
    if all(t.dim() == 4 for t in qkv) and dropout_p == 0 and len(
            {t.shape[0] for t in qkv}) == 1 and len({t.shape[-1] for t in qkv}) == 1 and \
            (attn_mask is None or not attn_mask.requires_grad):
        return "ScaledDotProductFlashAttentionForCpuBackward0"
    return _MATMUL_NODE[max(query.dim(), value.dim()) >= 3]


def _sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, flash):
    L, S = query.shape[-2], key.shape[-2]
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    if flash:
        # long sequences: blockwise online softmax, memory linear in the sequence length
        return _attention.flash_attention(query, key, value, is_causal, scale, attn_mask)
    if enable_gqa and query.shape[-3] != key.shape[-3]:
        rep = query.shape[-3] // key.shape[-3]
        key, value = key.repeat_interleave(rep, -3), value.repeat_interleave(rep, -3)
    scores = (query @ key.transpose(-2, -1)) * scale
    if is_causal:
        attn_mask = ember.ones(L, S, dtype=ember.bool, device=query.device).tril()
    if attn_mask is not None:
        if attn_mask.dtype is ember.bool:
            scores = scores.masked_fill(attn_mask.logical_not(), float("-inf"))
        else:
            scores = scores + attn_mask
    attn = softmax(scores, -1)
    if attn_mask is not None:
        # NOTE: torch's safe softmax: a row every key of which is masked out gives zeros
        attn = attn.masked_fill(scores.detach().amax(-1, keepdim=True) == float("-inf"), 0.0)
    if dropout_p > 0:
        attn = dropout(attn, dropout_p)
    return attn @ value


def _in_projection(q, k, v, w, b, w_q=None, w_k=None, w_v=None):
    if w is not None:
        E = q.shape[-1]
        wq, wk, wv = w[:E], w[E:2 * E], w[2 * E:]
    else:
        wq, wk, wv = w_q, w_k, w_v
        E = wq.shape[0]
    bq, bk, bv = (b[:E], b[E:2 * E], b[2 * E:]) if b is not None else (None, None, None)
    return linear(q, wq, bq), linear(k, wk, bk), linear(v, wv, bv)


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads,
                                 in_proj_weight, in_proj_bias, bias_k, bias_v, add_zero_attn,
                                 dropout_p, out_proj_weight, out_proj_bias, training=True,
                                 key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None,
                                 k_proj_weight=None, v_proj_weight=None, static_k=None,
                                 static_v=None, average_attn_weights=True, is_causal=False):
    """torch's multi-head attention on (L, N, E) inputs (or unbatched (L, E))."""
    unbatched = query.dim() == 2
    if unbatched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    L, N, E = query.shape
    if E != embed_dim_to_check:
        raise AssertionError(f"was expecting embedding dimension of {embed_dim_to_check}, but "
                             f"got {E}")
    hd = E // num_heads
    q, k, v = _in_projection(query, key, value, None if use_separate_proj_weight else
                             in_proj_weight, in_proj_bias, q_proj_weight, k_proj_weight,
                             v_proj_weight)
    if is_causal and attn_mask is None:
        attn_mask = ember.ones(L, key.shape[0], dtype=ember.bool, device=query.device).tril()
        attn_mask = ~attn_mask
    if attn_mask is not None and attn_mask.dim() == 2:
        attn_mask = attn_mask.unsqueeze(0)
    if bias_k is not None:
        k = ember.cat([k, bias_k.repeat(1, N, 1)])
        v = ember.cat([v, bias_v.repeat(1, N, 1)])
        if attn_mask is not None:
            attn_mask = pad_last(attn_mask)
        if key_padding_mask is not None:
            key_padding_mask = pad_last(key_padding_mask)
    # (L, N, E) -> (N * heads, L, hd)
    q = q.reshape(L, N * num_heads, hd).transpose(0, 1)
    k = k.reshape(k.shape[0], N * num_heads, hd).transpose(0, 1)
    v = v.reshape(v.shape[0], N * num_heads, hd).transpose(0, 1)
    if add_zero_attn:
        k = ember.cat([k, ember.zeros(k.shape[0], 1, hd, dtype=k.dtype, device=k.device)], 1)
        v = ember.cat([v, ember.zeros(v.shape[0], 1, hd, dtype=v.dtype, device=v.device)], 1)
        if attn_mask is not None:
            attn_mask = pad_last(attn_mask)
        if key_padding_mask is not None:
            key_padding_mask = pad_last(key_padding_mask)
    S = k.shape[1]
    mask = None
    if attn_mask is not None:
        mask = ember.zeros(attn_mask.shape, dtype=q.dtype, device=q.device).masked_fill(
            attn_mask, float("-inf")) if attn_mask.dtype is ember.bool else attn_mask
    if key_padding_mask is not None:
        kpm = key_padding_mask.reshape(N, 1, 1, S).expand(N, num_heads, 1, S).reshape(
            N * num_heads, 1, S)
        kpm = ember.zeros(kpm.shape, dtype=q.dtype, device=q.device).masked_fill(
            kpm, float("-inf")) if kpm.dtype is ember.bool else kpm
        mask = kpm if mask is None else mask + kpm
    scores = (q * (1.0 / math.sqrt(hd))) @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores + mask
    attn = softmax(scores, -1)
    if dropout_p > 0 and training:
        attn = dropout(attn, dropout_p)
    out = (attn @ v).transpose(0, 1).reshape(L * N, E)
    out = linear(out, out_proj_weight, out_proj_bias).reshape(L, N, E)
    weights = None
    if need_weights:
        weights = attn.reshape(N, num_heads, L, S)
        if average_attn_weights:
            weights = weights.mean(1)
    if unbatched:
        out = out.squeeze(1)
        weights = weights.squeeze(0) if weights is not None else None
    return out, weights


def pad_last(t):
    """Append one zero (False) column on the last dim (for bias_k / add_zero_attn masks)."""
    return ember.cat([t, ember.zeros(tuple(t.shape[:-1]) + (1,), dtype=t.dtype,
                                     device=t.device)], -1)


def _inplace_form(name):
    fn = globals()[name]

    def f(input, *args, **kwargs):
        return fn(input, *args, inplace=True, **kwargs)
    f.__name__ = f.__qualname__ = name + "_"
    f.__doc__ = f"``{name}(input, ..., inplace=True)``: :func:`{name}` in place, returning input."
    return f


# torch.nn.functional's in-place spellings (torch.relu_ and co. are torch's own)
for _n in ("celu", "elu", "hardtanh", "leaky_relu", "relu", "rrelu", "selu", "threshold"):
    globals()[_n + "_"] = _inplace_form(_n)
del _n

from ._conv_functional import *  # noqa
from ._resample_functional import *  # noqa
from ._norm_functional import *  # noqa
from ._loss_functional import *  # noqa
from ._embedding_functional import *  # noqa
from ._vision_functional import *  # noqa
from ._scaled_mm_functional import *  # noqa
from .._aten_nn import conv_tbc  # noqa: E402,F401  (torch.nn.functional re-exports torch's)


def __getattr__(name):
    # torch.nn.functional re-exports the __torch_function__ helpers (ember.overrides)
    if name in ("has_torch_function", "has_torch_function_unary", "has_torch_function_variadic",
                "handle_torch_function"):
        from .. import overrides
        return getattr(overrides, name)
    raise AttributeError(f"module 'ember.nn.functional' has no attribute '{name}'")


def assert_int_or_pair(arg, arg_name, message):
    """Raise AssertionError(``message.format(arg_name)``) unless ``arg`` is an int or a pair.

    Example:
        >>> import ember
        >>> ember.nn.functional.assert_int_or_pair((2, 3), "kernel_size", "{} must be a pair")
    """
    if not (isinstance(arg, int) or len(arg) == 2):
        raise AssertionError(message.format(arg_name))


boolean_dispatched = {}


def boolean_dispatch(arg_name, arg_index, default, if_true, if_false, module_name, func_name):
    """A function calling ``if_true`` or ``if_false`` by the boolean argument ``arg_name``
    (at position ``arg_index``, ``default`` when absent); one of the two may carry the
    docstring, which the result takes (torch's helper behind ``max_pool2d(return_indices=)``).

    Example:
        >>> import ember
        >>> F = ember.nn.functional
        >>> f = F.boolean_dispatch("twice", 1, False, lambda x, twice: 2 * x,
        ...                        lambda x, twice=False: x, None, "f")
        >>> f(3), f(3, True), f(3, twice=True)
        (3, 6, 6)
    """
    def fn(*args, **kwargs):
        flag = kwargs[arg_name] if arg_name in kwargs else \
            args[arg_index] if arg_index < len(args) else default
        return if_true(*args, **kwargs) if flag else if_false(*args, **kwargs)
    if if_true.__doc__ is None and if_false.__doc__ is not None:
        if_true.__doc__ = doc = if_false.__doc__
    elif if_false.__doc__ is None and if_true.__doc__ is not None:
        if_false.__doc__ = doc = if_true.__doc__
    elif if_false.__doc__ is None and if_true.__doc__ is None:
        doc = None
    else:
        raise RuntimeError("only one function can have a docstring")
    fn.__doc__ = doc
    if module_name is not None:
        fn.__module__ = module_name
    if func_name is not None:
        fn.__name__ = func_name
    boolean_dispatched[fn] = {"if_true": if_true, "if_false": if_false, "index": arg_index,
                              "default": default, "arg_name": arg_name}
    return fn
