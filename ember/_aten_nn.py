"""``torch.<name>`` spellings of neural-network functions: torch exposes its aten kernels at the
top level with their own argument order (``torch.embedding(weight, indices)``,
``torch.batch_norm(input, weight, bias, running_mean, ...)``) and integer reductions
(1 mean, 2 sum, anything else none). Each one here calls ``ember.nn.functional``, loaded on
first use so ``import ember`` stays cheap.
"""
import importlib

_REDUCTION = {0: "none", 1: "mean", 2: "sum"}


def _F():
    return importlib.import_module("ember.nn.functional")


def _reduction(r):
    # NOTE: aten reduces by mean for 1 and sum for 2 and leaves any other value unreduced; the
    # top-level bindings default to that unreduced case, unlike nn.functional's "mean".
    return _REDUCTION.get(r, "none")


# ---- same arguments as nn.functional ----------------------------------------------------------

_SAME = ("adaptive_avg_pool1d", "avg_pool1d", "bilinear", "celu", "channel_shuffle", "conv1d",
         "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
         "cosine_similarity", "group_norm", "hardshrink", "layer_norm", "pairwise_distance",
         "pdist", "pixel_shuffle", "pixel_unshuffle", "prelu", "rms_norm", "selu", "threshold")


def _forward(name):
    def f(*args, **kwargs):
        return getattr(_F(), name)(*args, **kwargs)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"``torch.{name}``: :func:`ember.nn.functional.{name}`."
    return f


FUNCTIONS = {n: _forward(n) for n in _SAME}


# ---- aten's argument order ----------------------------------------------------------------------

def dropout(input, p, train):
    return _F().dropout(input, p, train)


def dropout_(input, p, train):
    return _F().dropout(input, p, train, inplace=True)


def alpha_dropout_(input, p, train):
    return _F().alpha_dropout(input, p, train, inplace=True)


def feature_dropout_(input, p, train):
    return _F()._feature_dropout(input, p, train, True, 2)


def feature_alpha_dropout_(input, p, train):
    return _F().feature_alpha_dropout(input, p, train, inplace=True)


def embedding_renorm_(input, indices, max_norm, norm_type):
    """Scales the rows of ``input`` that ``indices`` names whose ``norm_type``-norm passes
    ``max_norm`` to ``max_norm / (norm + 1e-7)`` of themselves, in place (what
    ``F.embedding(max_norm=...)`` does first)."""
    importlib.import_module("ember.nn._embedding_functional")._renorm_(
        input, indices.reshape(-1).cpu().numpy(), max_norm, norm_type)
    return input


def alpha_dropout(input, p, train):
    return _F().alpha_dropout(input, p, train)


def feature_dropout(input, p, train):
    """Dropout of whole channels (dim 1 of a batched input), as ``dropout2d``."""
    return _F()._feature_dropout(input, p, train, False, 2)


def feature_alpha_dropout(input, p, train):
    return _F().feature_alpha_dropout(input, p, train)


def batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps,
               cudnn_enabled):
    return _F().batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


def instance_norm(input, weight, bias, running_mean, running_var, use_input_stats, momentum,
                  eps, cudnn_enabled):
    return _F().instance_norm(input, running_mean, running_var, weight, bias, use_input_stats,
                              momentum, eps)


def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return _F().embedding(indices, weight, None if padding_idx == -1 else padding_idx,
                          scale_grad_by_freq=scale_grad_by_freq)


def rrelu(input, lower=0.125, upper=1.0 / 3, training=False, generator=None):
    return _F().rrelu(input, lower, upper, training)


def max_pool1d_with_indices(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _F().max_pool1d(input, kernel_size, stride or None, padding, dilation, ceil_mode,
                           return_indices=True)


def _max_pool(n):
    def f(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        return getattr(_F(), f"max_pool{n}d")(input, kernel_size, stride or None, padding,
                                               dilation, ceil_mode)
    f.__name__ = f.__qualname__ = f"max_pool{n}d"
    return f


def adaptive_max_pool1d(input, output_size):
    """Always returns ``(output, indices)``, as torch's top-level function does."""
    return _F().adaptive_max_pool1d(input, output_size, return_indices=True)


# ---- losses with integer reductions (unreduced by default, as torch's bindings) -------------

def kl_div(input, target, reduction=0, *, log_target=False):
    return _F().kl_div(input, target, reduction=_reduction(reduction), log_target=log_target)


def cosine_embedding_loss(input1, input2, target, margin=0.0, reduction=0):
    return _F().cosine_embedding_loss(input1, input2, target, margin,
                                      reduction=_reduction(reduction))


def hinge_embedding_loss(input, target, margin=1.0, reduction=0):
    return _F().hinge_embedding_loss(input, target, margin, reduction=_reduction(reduction))


def margin_ranking_loss(input1, input2, target, margin=0.0, reduction=0):
    return _F().margin_ranking_loss(input1, input2, target, margin, reduction=_reduction(reduction))


def poisson_nll_loss(input, target, log_input, full, eps, reduction):
    return _F().poisson_nll_loss(input, target, log_input, full, eps=eps,
                                 reduction=_reduction(reduction))


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-06, swap=False,
                        reduction=0):
    return _F().triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap,
                                    reduction=_reduction(reduction))


def binary_cross_entropy_with_logits(input, target, weight=None, pos_weight=None, reduction=0):
    return _F().binary_cross_entropy_with_logits(input, target, weight,
                                                 reduction=_reduction(reduction),
                                                 pos_weight=pos_weight)


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=0,
             zero_infinity=False):
    return _F().ctc_loss(log_probs, targets, input_lengths, target_lengths, blank,
                         _reduction(reduction), zero_infinity)


def conv_tbc(input, weight, bias, pad=0):
    """1-D convolution over a (time, batch, channels) input with a (width, in, out) weight."""
    out = _F().conv1d(input.permute(1, 2, 0), weight.permute(2, 1, 0), bias, padding=pad)
    return out.permute(2, 0, 1)


_MODES, _PADDINGS = ("bilinear", "nearest", "bicubic"), ("zeros", "border", "reflection")


def grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners):
    """``grid_sample`` with integer modes (0 bilinear, 1 nearest, 2 bicubic) and paddings
    (0 zeros, 1 border, 2 reflection)."""
    return _F().grid_sample(input, grid, _MODES[interpolation_mode], _PADDINGS[padding_mode],
                            align_corners)


def affine_grid_generator(theta, size, align_corners):
    return _F().affine_grid(theta, size, align_corners)


# ---- recurrent cells and layers over flat weight lists -------------------------------------------

def _rnn():
    return importlib.import_module("ember.nn.modules.rnn")


def lstm_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One LSTM step: ``(h', c')`` from ``hx = (h, c)``."""
    return _rnn()._lstm_cell(_F().linear(input, w_ih, b_ih), hx[0], hx[1], w_hh, b_hh)


def gru_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    return _rnn()._gru_cell(_F().linear(input, w_ih, b_ih), hx, w_hh, b_hh)


def rnn_tanh_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    return _rnn()._rnn_cell(_F().linear(input, w_ih, b_ih), hx, w_hh, b_hh, False)


def rnn_relu_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    return _rnn()._rnn_cell(_F().linear(input, w_ih, b_ih), hx, w_hh, b_hh, True)


def _flat_rnn(mode):
    """torch's ``lstm``/``gru``/``rnn_tanh``/``rnn_relu`` over a flat list of weights, in the
    layer-major, direction-minor order ``_flat_weights`` of the modules has."""
    def f(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
        base = _rnn().RNNBase
        per = 4 if has_biases else 2
        proj = mode == "LSTM" and len(params) == per * num_layers * (1 + bidirectional) + \
            num_layers * (1 + bidirectional)
        per += proj
        hx = tuple(hx) if mode == "LSTM" else hx[0] if isinstance(hx, (list, tuple)) else hx
        layer = type("FlatRNN", (), {
            "_run": base._run, "_check_input": base._check_input,
            "_initial_states": base._initial_states, "_scan": base._scan})()
        h0 = hx[0] if mode == "LSTM" else hx
        layer.__dict__.update(
            mode=mode, num_layers=num_layers, bidirectional=bidirectional, dropout=dropout,
            training=train, batch_first=batch_first, input_size=params[0].shape[1],
            hidden_size=params[1].shape[1], proj_size=h0.shape[-1] if proj else 0)

        def weights(k, d):
            w = list(params[(k * (1 + bidirectional) + d) * per:][:per])
            w_hr = w.pop() if proj else None
            return (w[0], w[1], w[2], w[3], w_hr) if has_biases else (w[0], w[1], None, None, w_hr)
        layer._weights = weights
        out, (hn, cn) = layer._run(input, hx)
        return (out, hn, cn) if mode == "LSTM" else (out, hn)
    f.__name__ = f.__qualname__ = mode.lower()
    return f


FUNCTIONS.update({n: _forward(n) for n in ("celu_", "selu_", "rrelu_", "threshold_")})
FUNCTIONS.update({f.__name__: f for f in (
    dropout, alpha_dropout, feature_dropout, feature_alpha_dropout, batch_norm, instance_norm,
    dropout_, alpha_dropout_, feature_dropout_, feature_alpha_dropout_, embedding_renorm_,
    embedding, rrelu, max_pool1d_with_indices, adaptive_max_pool1d, kl_div,
    cosine_embedding_loss, hinge_embedding_loss, margin_ranking_loss, poisson_nll_loss,
    triplet_margin_loss, binary_cross_entropy_with_logits, ctc_loss, conv_tbc, grid_sampler,
    affine_grid_generator, lstm_cell,
    gru_cell, rnn_tanh_cell, rnn_relu_cell)})
def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """aten's embedding_bag: ``(output, offset2bag, bag_size, max_indices)``, the output as
    ``F.embedding_bag``'s (mode 0 sum, 1 mean, 2 max) and the bookkeeping tensors torch's CPU
    kernel returns beside it: each index's bag, each bag's count of non-padding indices and,
    for max, the row each output element came from.

    Example:
        >>> w = ember.arange(6.).reshape(3, 2)
        >>> out, offset2bag, bag_size, max_indices = ember.embedding_bag(
        ...     w, ember.tensor([0, 2, 1]), ember.tensor([0, 2]), mode=2)
        >>> out, max_indices
        (tensor([[4., 5.],
                [2., 3.]]), tensor([[2, 2],
                [1, 1]]))
    """
    import ember
    if mode not in (0, 1, 2):
        raise RuntimeError("`mode` must be sum, mean, or max.")
    if offsets.numel() and int(offsets[0]) != 0:
        raise RuntimeError(f"offsets[0] has to be 0, i.e., the first sequence in the mini-batch "
                           f"has to start from position 0. However, got {int(offsets[0])}")
    indices = indices.reshape(-1)       # (aten reads any indices flat, bagged by offsets)
    if offsets.numel() and int(offsets[-1]) > indices.numel():
        raise RuntimeError(f"offsets[-1] can not be greater than input's length "
                           f"{indices.numel()} but got offsets[-1] of {int(offsets[-1])}")
    if per_sample_weights is not None and mode != 0:
        raise RuntimeError("embedding_bag: per_sample_weights only supported with mode='sum'")
    # (F refuses scale_grad_by_freq with max, which aten ignores there)
    out = _F().embedding_bag(indices, weight, offsets,
                             scale_grad_by_freq=scale_grad_by_freq and mode != 2,
                             mode=("sum", "mean", "max")[mode], sparse=sparse,
                             per_sample_weights=per_sample_weights,
                             include_last_offset=include_last_offset, padding_idx=padding_idx)
    n_bags = offsets.numel() - bool(include_last_offset)
    long = dict(dtype=ember.int64, device=weight.device)
    with ember.no_grad():
        starts = offsets[:n_bags].to(ember.int64)
        bag = (ember.searchsorted(starts, ember.arange(indices.numel(), **long), right=True) - 1
               ).clamp(0, max(n_bags - 1, 0))
        real = indices != padding_idx if padding_idx is not None else ember.ones_like(
            indices, dtype=ember.bool)
        size = ember.zeros(n_bags, **long).index_add_(0, bag, real.to(ember.int64))
        # NOTE: torch's CPU sum path skips the bookkeeping: bag_size and max_indices are zeros,
        # and its fast float32/16 kernel (no padding_idx) leaves offset2bag empty; mean's
        # max_indices is bag_size
        fast = mode == 0 and padding_idx is None and weight.dtype in (
            ember.float32, ember.float16, ember.bfloat16)
        offset2bag = ember.zeros(0, **long) if fast else bag
        if mode == 0:
            size = max_indices = ember.zeros(n_bags, **long)
        elif mode == 1:
            max_indices = size.clone()
        else:
            rows = weight.detach()[indices].masked_fill(~real[:, None], float("-inf"))
            best = ember.full((n_bags, weight.shape[1]), float("-inf"), dtype=weight.dtype,
                              device=weight.device).scatter_reduce(
                0, bag[:, None].expand_as(rows), rows, "amax")
            hit = (rows == best[bag]) & real[:, None]
            pos = ember.where(hit, ember.arange(indices.numel(), **long)[:, None], indices.numel())
            first = ember.full((n_bags, weight.shape[1]), indices.numel(), **long).scatter_reduce(
                0, bag[:, None].expand_as(pos), pos, "amin")
            max_indices = ember.where(first < indices.numel(),
                                      indices.to(ember.int64)[first.clamp(max=max(
                                          indices.numel() - 1, 0))], 0)
    return out, offset2bag, size, max_indices


FUNCTIONS.update({f"max_pool{n}d": _max_pool(n) for n in (1, 2, 3)})
FUNCTIONS["embedding_bag"] = embedding_bag
FUNCTIONS.update(grid_sampler_2d=grid_sampler, grid_sampler_3d=grid_sampler)
FUNCTIONS.update(lstm=_flat_rnn("LSTM"), gru=_flat_rnn("GRU"), rnn_tanh=_flat_rnn("RNN_TANH"),
                 rnn_relu=_flat_rnn("RNN_RELU"))
METHODS = {n: FUNCTIONS[n] for n in ("hardshrink", "prelu")}
