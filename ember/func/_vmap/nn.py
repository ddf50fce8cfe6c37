"""Batching rules of the nn ops: the batch folded into N (or the channels), and per-example
weights (per-sample gradients) by functions of their own."""
import ember

from ..._C import kernels as _kernels
from ..._ops import conv as _conv
from ..._ops.nn import kernel_grads
from ..._ops.registry import get
from ..._tensor import Tensor
from .batched import _level_of, _lifted, _map_out, _map_tensors, _size, _wrap, lift_one
from .generic import _loop, _pointwise, _trailing


def _linear(opdef, level, args, kwargs):
    x, w, b = (*args, None)[:3] if len(args) < 3 else args[:3]
    b = kwargs.get("bias", b)
    if _level_of(w) != level and _level_of(b) != level:
        return _wrap(get("linear")(x._value, w, b), level)
    if _level_of(w) == level and x.dim() >= 1 and type(w._value) is Tensor and \
            _level_of(b) in (0, level) and (b is None or b.dim() == 1):
        n = _size(level)
        xv = lift_one(x, level, n)
        bv = None if b is None else lift_one(b, level, n)
        three = xv.dim() == 3               # (B, N, in) already: no reshapes
        y = _PerExampleLinear.apply(xv if three else xv.reshape(n, -1, xv.shape[-1]), w._value, bv)
        return _wrap(y if three else y.reshape(*xv.shape[:-1], y.shape[-1]), level)
    out = ember.matmul(x, w.transpose(-1, -2))
    return out if b is None else out + b


def _is_expanded(w):
    """Whether ``w``'s batch dim is an expand (stride 0): the per-sample gradient case, whose
    weights are the same for every example."""
    strides = getattr(getattr(w, "_data", None), "strides", None)
    return strides is not None and strides[0] == 0


def _expanded(w):
    """``w``'s one matrix where ``_is_expanded(w)``, else None."""
    return w[0] if _is_expanded(w) else None


class _PerExampleLinear(ember.autograd.Function):
    """``linear`` of (B, N, in) inputs with per-example weights (B, out, in): a plain matrix
    product where the weights are one expanded matrix, and for N = 1 each example's weight
    gradient an outer product by broadcasting (a batched matmul of inner size 1 is several
    times slower)."""

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        ctx.w0 = w0 = _expanded(w)
        if w0 is not None and (b is None or _is_expanded(b)):     # (linear adds the bias
            return get("linear")(x, w0, None if b is None else b[0])      # as it writes)
        y = x @ w0.T if w0 is not None else x @ w.transpose(1, 2)
        return y if b is None else y + b.unsqueeze(1)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        w0, (nx, nw, nb) = ctx.w0, ctx.needs_input_grad
        # (the first layer's input is the data: no gradient, a third of its backward)
        gx = g @ (w0 if w0 is not None else w) if nx else None
        gw = None if not nw else _outer(g[:, 0], x[:, 0]) if x.shape[1] == 1 else \
            g.transpose(1, 2) @ x
        return gx, gw, g.sum(1) if nb else None

    @staticmethod
    def jvp(ctx, tx, tw, tb):
        x, w = ctx.saved_tensors
        out = tx @ w.transpose(1, 2) + x @ tw.transpose(1, 2)
        return out if tb is None else out + tb.unsqueeze(1)


def _outer(g, x):
    """Each example's outer product ``g[b] x[b]^T``: the rowops kernel (streaming stores, for
    a result of hundreds of MB) where nothing differentiates it, else by broadcasting."""
    arrays = kernel_grads(g, x)
    out = None if arrays is None else _kernels.outer(*arrays)
    return Tensor._wrap(out) if out is not None else g.unsqueeze(2) * x.unsqueeze(1)


def _convolution(opdef, level, args, kwargs):
    """Batch into N where only the input is batched (transposed too: the input gradient of a
    vmapped vjp); per-example weights that are one expanded kernel (per-sample gradients) by
    ``_PerExampleConv``; else (transposed too) as a grouped convolution with the batch folded
    into the channels."""
    x, w, bias, stride, padding, dilation, transposed, out_pad, groups = args
    n = _size(level)
    unb = x.dim() == w.dim() - 1
    if _level_of(w) != level and _level_of(bias) != level:
        v = x._value.reshape(-1, *x.shape[-(w.dim() - 1):])
        out = opdef(v, w, bias, stride, padding, dilation, transposed, out_pad, groups)
        return _wrap(out.reshape(n, *(() if unb else x.shape[:1]), *out.shape[1:]), level)
    xv, wv, bv = _lifted(level, x, w, bias)
    xv = xv.unsqueeze(1) if unb else xv                      # (B, N, C, ...)
    opts = (stride, padding, dilation, out_pad, groups)
    if not transposed and type(wv) is Tensor and _is_expanded(wv) and \
            type(bv) in (Tensor, type(None)):
        out = _PerExampleConv.apply(xv, wv, bv, *opts)
    else:
        out = _grouped_conv(xv, wv, bv, *opts, transposed)
    return _wrap(out.squeeze(1) if unb else out, level)


def _grouped_conv(x, w, b, stride, padding, dilation, out_pad, groups, transposed=False):
    """(B, N, C, ...) inputs convolved with per-example weights (B, O, C/groups, ...), or
    transposed with (B, C, O/groups, ...), as one convolution of B times the groups, the batch
    folded into the channels: (B, N, O, ...)."""
    n = x.shape[0]
    xv = x.movedim(0, 1).reshape(x.shape[1], n * x.shape[2], *x.shape[3:])
    out = get("convolution")(xv, w.reshape(-1, *w.shape[2:]), None if b is None else
                             b.reshape(-1), stride, padding, dilation, transposed, out_pad,
                             groups * n)
    return out.reshape(out.shape[0], n, -1, *out.shape[2:]).movedim(1, 0)


class _PerExampleConv(ember.autograd.Function):
    """``convolution`` of (B, N, C, ...) inputs with per-example weights that are one
    expanded kernel (per-sample gradients): the forward one plain convolution of the B * N
    inputs, without the grouped convolution's copies that fold the batch into the channels;
    the backward each example's weight gradient by the grouped weight-gradient kernel."""

    @staticmethod
    def forward(ctx, x, w, b, stride, padding, dilation, out_pad, groups):
        ctx.save_for_backward(x, w)
        ctx.opts, ctx.w0 = (stride, padding, dilation, out_pad, groups), w[0]
        one = b is None or _is_expanded(b)          # one bias for all: the convolution's
        y = get("convolution")(x.flatten(0, 1), ctx.w0, b[0] if b is not None and one else
                               None, stride, padding, dilation, False, out_pad, groups)
        y = y.reshape(x.shape[0], -1, *y.shape[1:])
        return y if one else y + b.reshape(*b.shape[:1], 1, -1, *(1,) * (y.dim() - 3))

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        (stride, padding, dilation, _, groups), (nx, nw, nb) = ctx.opts, ctx.needs_input_grad[:3]
        gx = gw = gb = None
        if nx:
            gx = _conv.input_grad(g.flatten(0, 1), (x.shape[0] * x.shape[1], *x.shape[2:]),
                                  ctx.w0, stride, padding, dilation, groups).reshape(x.shape)
        if nw:
            flat = lambda t: (t if t.shape[1] == 1 else t.movedim(0, 1)).reshape(  # noqa: E731
                t.shape[1], -1, *t.shape[3:])
            gw = _conv._weight_grad(flat(x), flat(g), tuple(w.shape[3:]), stride, padding,
                                    dilation, groups * x.shape[0]).reshape(w.shape)
        if nb:
            gb = g.sum((1, *range(3, g.dim())))
        return gx, gw, gb, None, None, None, None, None

    @staticmethod
    def jvp(ctx, tx, tw, tb, *_):
        x, w = ctx.saved_tensors
        out = get("convolution")(tx.flatten(0, 1), ctx.w0, None, *ctx.opts[:3], False,
                                 *ctx.opts[3:])
        return out.reshape(x.shape[0], -1, *out.shape[1:]) + _grouped_conv(x, tw, tb, *ctx.opts)


def _loss(opdef, level, args, kwargs):
    """nll_loss/cross_entropy_loss of class indices: the batch folded into N, the unweighted
    per-element losses times each element's class weight (0 where ignored) reduced per
    example: the mean divides by the weights' sum, as torch's."""
    call = dict(zip(opdef.params, args), **kwargs)
    x, target, w = call.pop("input"), call.pop("target"), call.pop("weight", None)
    if x.dim() == 1 and target.dim() == 0:          # one example without its N dim
        out = _loss(opdef, level, (x.unsqueeze(0), target.unsqueeze(0)),
                    dict(call, weight=w) if w is not None else call)
        return out.squeeze(0) if call.get("reduction") == "none" else out
    if x.dim() < 2 or target.dim() != x.dim() - 1:
        return _loop(opdef, level, args, kwargs)
    n, red, ignore = _size(level), call.pop("reduction", "mean"), call.get("ignore_index", -100)
    xv, tv = lift_one(x, level, n), lift_one(target, level, n)
    out = opdef(xv.reshape(-1, *xv.shape[2:]), tv.reshape(-1, *tv.shape[2:]),
                reduction="none", **call).reshape(n, -1)
    tv = tv.reshape(n, -1)
    kept = (tv != ignore).to(out.dtype)
    if w is not None:
        kept = kept * lift_one(w, level, n).to(out.dtype).gather(1, ember.where(
            tv == ignore, 0, tv))
        out = out * kept
    if red == "none":
        return _wrap(out.reshape(n, *target.shape), level)
    return _wrap(out.sum(1) if red == "sum" else out.sum(1) / kept.sum(1), level)


def _elementwise_loss(opdef, level, args, kwargs):
    """mse/huber/smooth_l1/binary cross-entropy: the per-element losses by the pointwise
    rule, then each example's mean or sum."""
    i = opdef.params.index("reduction")
    red = args[i] if i < len(args) else kwargs.get("reduction", "mean")
    args = list(args)
    if i < len(args):
        args[i] = "none"
    else:
        kwargs = dict(kwargs, reduction="none")
    out = _pointwise(opdef, level, args, kwargs)
    return out if red == "none" else out.sum() if red == "sum" else out.mean()


def _norm(opdef, level, args, kwargs):
    """layer_norm/rms_norm: the normalization on the batched input as it is; batched weights
    (per-sample gradients) scale and shift it afterwards."""
    call = dict(zip(opdef.params, args), **kwargs)
    x, w, b = call.pop("input"), call.pop("weight", None), call.pop("bias", None)
    if _level_of(w) != level and _level_of(b) != level:
        return _trailing(0)(opdef, level, args, kwargs)
    y = opdef(x, call.pop("normalized_shape"), **call)
    y = y if w is None else y * w
    return y if b is None else y + b


def _embedding(opdef, level, args, kwargs):
    """Batched weights: each example's rows picked by advanced indexing on the batch."""
    w, idx = args[:2]
    if _level_of(w) != level:
        return _trailing(1)(opdef, level, args, kwargs)
    pad = args[2] if len(args) > 2 else kwargs.get("padding_idx", -1)
    n = _size(level)
    iv = lift_one(idx, level, n)
    rows = ember.arange(n, device=iv.device).reshape(n, *(1,) * (iv.dim() - 1))
    y = w._value[rows, iv]
    if pad is not None and pad >= 0:        # the padding row's picks carry no gradient
        y = ember.where((iv == pad).unsqueeze(-1), y.detach(), y)
    return _wrap(y, level)


def _batch_norm(opdef, level, args, kwargs):
    """Each example's batch in its own channels: the batch folded into the channel dim."""
    x, w, b, rm, rv, training, eps = args
    n = _size(level)
    xv = lift_one(x, level, n)
    v = xv.movedim(0, 1).reshape(x.shape[0], n * x.shape[1], *x.shape[2:])
    per = [None if t is None else lift_one(t, level, n).reshape(-1) for t in (w, b, rm, rv)]
    out, mean, var = opdef(v, *per, training, eps)
    out = out.reshape(x.shape[0], n, *x.shape[1:]).movedim(1, 0)
    return _wrap(out, level), _wrap(mean.reshape(n, -1), level), _wrap(var.reshape(n, -1), level)


def _group_norm(opdef, level, args, kwargs):
    x, w, b, group, eps = args
    n = _size(level)
    xv = lift_one(x, level, n)
    out = opdef(xv.reshape(-1, *xv.shape[2:]), None, None, group, eps).reshape(xv.shape)
    shape = (n, 1, -1) + (1,) * (x.dim() - 2)
    out = out if w is None else out * lift_one(w, level, n).reshape(shape)
    return _wrap(out if b is None else out + lift_one(b, level, n).reshape(shape), level)


def _folded(opdef, level, args, kwargs):
    """The fused LSTM cell (and its backward): every operand's first dim is a batch, so the
    vmap batch folds into it."""
    n = _size(level)
    vs = _lifted(level, *args)
    if args[0].dim() == 1:
        return _map_out(opdef(*vs), level)
    outs = opdef(*[v.flatten(0, 1) for v in vs])
    return _map_tensors(outs, lambda o: _wrap(o.reshape(n, -1, *o.shape[1:]), level))


def _lstm_layer(opdef, level, args, kwargs):
    """The batch folded into the layer's batch dim (1 of the inputs, 0 of the states); per-
    example weights as the layer's grouped weights, a group per example (per example's group
    where they are grouped already): one batched product per step, forward and backward,
    or the shared weight's C kernels where they are one expanded (per-sample gradients)."""
    xproj, h0, c0, w_hh, b_hh = args[:5]
    n = _size(level)
    xv, hv, cv = _lifted(level, xproj, h0, c0)
    if _level_of(w_hh) == level or _level_of(b_hh) == level or w_hh.dim() == 3:
        w_hh, b_hh = (None if t is None else lift_one(t, level, n).flatten(0, 1) if t.dim() > k
                      else lift_one(t, level, n) for t, k in ((w_hh, 2), (b_hh, 1)))
    outs = opdef(xv.movedim(0, 1).flatten(1, 2), hv.flatten(0, 1), cv.flatten(0, 1), w_hh, b_hh,
                 *args[5:], **kwargs)
    seq = lambda o: _wrap(o.reshape(o.shape[0], n, -1, o.shape[-1]).movedim(1, 0), level)  # noqa
    state = lambda o: _wrap(o.reshape(n, -1, o.shape[-1]), level)  # noqa: E731
    return seq(outs[0]), state(outs[1]), state(outs[2]), seq(outs[3]), seq(outs[4])


def _avg_pool_backward(opdef, level, args, kwargs):
    """The gradient batched, ``input_size`` (a shape) grows its leading dims."""
    g, size = args[0], tuple(args[1])
    if _level_of(g) != level or any(_level_of(a) == level for a in args[2:]):
        return _loop(opdef, level, args, kwargs)
    v = g._value
    return _map_out(opdef(v, tuple(v.shape[:v.dim() - len(size)]) + size, *args[2:], **kwargs),
                    level)


RULES = {"linear": _linear, "convolution": _convolution, "nll_loss": _loss,
         "cross_entropy_loss": _loss, "embedding": _embedding, "layer_norm": _norm,
         "rms_norm": _norm, "native_batch_norm": _batch_norm, "native_group_norm": _group_norm,
         "_lstm_cell": _folded, "_lstm_cell_backward": _folded, "_lstm_layer": _lstm_layer,
         "_avg_pool_nd_backward": _avg_pool_backward,
         **dict.fromkeys(("mse_loss", "huber_loss", "smooth_l1_loss", "binary_cross_entropy",
                          "binary_cross_entropy_with_logits"), _elementwise_loss),
         **dict.fromkeys(("_max_pool_nd", "_adaptive_max_pool_nd", "_avg_pool_nd"), _trailing(0))}
