"""ONNX lowerings of ember's ops, by op name: ``fn(g, *args, **kwargs)`` takes the op's own
arguments (those of its forward after ``xp``; tensors as ``V`` values) and emits ONNX nodes
with ``g.op``; it returns the output's value name (a tuple of them for several outputs).
``g.out`` is the result's ``TensorMeta``. An OpDef may carry its own (``opdef.onnx = fn``,
written beside it), which wins over this table.
"""
import math

import numpy as np

from .. import _dtype

LOWERINGS = {}
_BOOL = _dtype.bool_


def lowering(*names):
    def deco(fn):
        for n in names:
            LOWERINGS[n] = fn
        return fn
    return deco


def _ints(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return list(shape)


# ---- pointwise -------------------------------------------------------------------------------

_UNARY = {"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid", "exp": "Exp", "log": "Log",
          "neg": "Neg", "abs": "Abs", "sqrt": "Sqrt", "erf": "Erf", "sin": "Sin", "cos": "Cos",
          "floor": "Floor", "ceil": "Ceil", "sign": "Sign", "reciprocal": "Reciprocal",
          "tan": "Tan", "asin": "Asin", "acos": "Acos", "atan": "Atan", "sinh": "Sinh",
          "cosh": "Cosh", "asinh": "Asinh", "acosh": "Acosh", "atanh": "Atanh",
          "bitwise_not": "Not", "contiguous": "Identity", "clone": "Identity", "alias": "Identity",
          "detach": "Identity", "_to_copy": "Identity"}
for _name, _op in _UNARY.items():
    LOWERINGS[_name] = (lambda op: lambda g, x, *rest, **kw: g.op(op, x))(_op)

_BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow",
           "gt": "Greater", "lt": "Less", "ge": "GreaterOrEqual", "le": "LessOrEqual",
           "eq": "Equal", "logical_and": "And", "logical_or": "Or", "maximum": "Max",
           "minimum": "Min", "rsub": "Sub", "bitwise_and": "And", "bitwise_or": "Or",
           "bitwise_xor": "Xor", "logical_xor": "Xor"}


def _binary(name, op):
    def fn(g, a, b, alpha=1, rounding_mode=None):
        if op in ("And", "Or", "Xor"):
            if g.out.dtype.name != "bool":
                g.unsupported(f"{name} on {g.out.dtype} tensors (ONNX's are logical)")
            return g.op(op, *(g.cast(v, _BOOL) for v in (a, b)))
        if rounding_mode is not None:
            return _rounded_div(g, a, b, rounding_mode)
        a, b = g.promote(a, b, compare=name in ("gt", "lt", "ge", "le", "eq"))
        if alpha != 1:
            b = g.op("Mul", b, g.scalar(alpha, g.out.dtype))
        return g.op(op, b, a) if name == "rsub" else g.op(op, a, b)
    return fn


for _name, _op in _BINARY.items():
    LOWERINGS[_name] = _binary(_name, _op)


def _rounded_div(g, a, b, mode):
    if not g.out.dtype.is_floating_point:
        g.unsupported(f"integer div with rounding_mode={mode!r}")
    q = g.op("Div", *g.promote(a, b))
    if mode == "floor":
        return g.op("Floor", q)
    return g.op("Where", g.op("Less", q, g.scalar(0, g.out.dtype)), g.op("Ceil", q),
                g.op("Floor", q))


@lowering("logical_not")
def _logical_not(g, x):
    return g.op("Not", g.cast(x, _BOOL))


@lowering("ne")
def _ne(g, a, b):
    return g.op("Not", g.op("Equal", *g.promote(a, b, compare=True)))


@lowering("rsqrt")
def _rsqrt(g, x):
    return g.op("Reciprocal", g.op("Sqrt", x))


@lowering("log1p")
def _log1p(g, x):
    return g.op("Log", g.op("Add", x, g.scalar(1, g.out.dtype)))


@lowering("expm1")
def _expm1(g, x):
    return g.op("Sub", g.op("Exp", x), g.scalar(1, g.out.dtype))


@lowering("gelu")
def _gelu(g, x, approximate="none"):
    half = g.op("Mul", x, g.scalar(0.5, g.out.dtype))
    if approximate == "tanh":
        cube = g.op("Mul", g.op("Mul", x, x), x)
        inner = g.op("Add", x, g.op("Mul", cube, g.scalar(0.044715, g.out.dtype)))
        t = g.op("Tanh", g.op("Mul", inner, g.scalar(math.sqrt(2 / math.pi), g.out.dtype)))
    else:
        t = g.op("Erf", g.op("Mul", x, g.scalar(1 / math.sqrt(2), g.out.dtype)))
    return g.op("Mul", half, g.op("Add", t, g.scalar(1, g.out.dtype)))


@lowering("clamp")
def _clamp(g, x, min=None, max=None):
    if hasattr(min, "name") or hasattr(max, "name"):     # (Clip takes scalar bounds only)
        y = g.cast(x, g.out.dtype)
        y = y if min is None else g.op("Max", y, g.promote(x, min)[1])
        return y if max is None else g.op("Min", y, g.promote(x, max)[1])

    def bound(v):
        return "" if v is None else g.scalar(v, g.out.dtype)
    return g.op("Clip", x, bound(min), bound(max))


@lowering("where")
def _where(g, cond, a=None, b=None):
    if a is None:
        g.unsupported("where(condition) (its size depends on the data)")
    a, b = g.promote(a, b)
    return g.op("Where", cond, a, b)


@lowering("masked_fill")
def _masked_fill(g, x, mask, value):
    v = g.cast(value, g.out.dtype) if hasattr(value, "name") else g.scalar(value, g.out.dtype)
    return g.op("Where", mask, v, x)


@lowering("_to_dtype")
def _to_dtype(g, x, dtype):
    return g.cast(x, dtype)


# ---- nn --------------------------------------------------------------------------------------

@lowering("linear")
def _linear(g, x, w, b=None):
    if len(w.shape) == 1:       # (a vector weight: one output, the last dim dropped)
        y = g.op("MatMul", x, w)
        return y if b is None else g.op("Add", y, b)
    if len(x.shape) == 2:
        return g.op("Gemm", x, w, b if b is not None else "", transB=1)
    y = g.op("MatMul", x, g.op("Transpose", w, perm=[1, 0]))
    return y if b is None else g.op("Add", y, b)


@lowering("convolution")
def _convolution(g, x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    if isinstance(padding, str):
        if padding != "valid":
            return g.op("Conv", x, w, b if b is not None else "", auto_pad="SAME_UPPER",
                        strides=list(stride), dilations=list(dilation), group=groups)
        padding = (0,) * len(stride)
    attrs = dict(strides=list(stride), pads=list(padding) * 2, dilations=list(dilation),
                 group=groups)
    if transposed:
        return g.op("ConvTranspose", x, w, b if b is not None else "",
                    output_padding=list(output_padding), **attrs)
    return g.op("Conv", x, w, b if b is not None else "", **attrs)


@lowering("_max_pool_nd")
def _max_pool(g, x, kernel_size, stride, padding, dilation, ceil_mode):
    y = g.op("MaxPool", x, kernel_shape=list(kernel_size), strides=list(stride),
             pads=list(padding) * 2, dilations=list(dilation), ceil_mode=int(ceil_mode))
    return y, None          # (the indices: only where no one reads them)


@lowering("_avg_pool_nd")
def _avg_pool(g, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    # AveragePool over the padding that fits every window (counted: a plain window mean),
    # then rescaled to torch's divisors, which cover ceil_mode, count_include_pad=False and
    # divisor_override alike
    from .._ops.pooling import _avg_divisor, _avg_geometry
    nd, unbatched = len(kernel_size), len(x.shape) == len(kernel_size) + 1
    size = tuple(x.shape[-nd:])
    osize, hi = _avg_geometry(size, kernel_size, stride, padding, ceil_mode)
    dt = np.dtype(g.np(x.dtype))
    x = g.op("Unsqueeze", x, g.ints([0])) if unbatched else x
    y = g.op("AveragePool", x, kernel_shape=list(kernel_size), strides=list(stride),
             pads=list(padding) + list(hi), count_include_pad=1)
    div = _avg_divisor(np, size, kernel_size, stride, padding, osize, count_include_pad,
                       divisor_override, dt)
    y = g.op("Mul", y, g.const((math.prod(kernel_size) / np.asarray(div)).astype(dt)))
    return g.op("Squeeze", y, g.ints([0])) if unbatched else y


@lowering("softmax", "log_softmax")
def _softmax(g, x, dim, dtype=None):
    x = g.cast(x, dtype) if dtype is not None else x
    return g.op("Softmax" if g.node.target.name == "softmax" else "LogSoftmax", x, axis=dim)


@lowering("layer_norm")
def _layer_norm(g, x, normalized_shape, weight=None, bias=None, eps=1e-5):
    k = len(normalized_shape)
    if g.opset < 17:            # (no LayerNormalization before opset 17)
        axes = list(range(len(x.shape) - k, len(x.shape)))
        d = g.op("Sub", x, g.reduce("ReduceMean", x, axes, 1))
        var = g.reduce("ReduceMean", g.op("Mul", d, d), axes, 1)
        y = g.op("Div", d, g.op("Sqrt", g.op("Add", var, g.scalar(eps, x.dtype))))
        y = y if weight is None else g.op("Mul", y, weight)
        return y if bias is None else g.op("Add", y, bias)
    # NOTE: onnxruntime 1.23 crashes on a LayerNormalization without its bias input
    ns, dt = tuple(normalized_shape), g.np(x.dtype)
    weight = weight if weight is not None else g.const(np.ones(ns, dt))
    bias = bias if bias is not None else g.const(np.zeros(ns, dt))
    return g.op("LayerNormalization", x, weight, bias, axis=-k, epsilon=eps)


@lowering("embedding")
def _embedding(g, weight, indices, padding_idx=-1):
    return g.op("Gather", weight, indices, axis=0)


@lowering("cross_entropy_loss")
def _cross_entropy(g, logits, target, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    shape, dt = logits.shape, g.out.dtype
    if len(shape) == 1:      # (one unbatched sample: a batch of one)
        logits, target = (g.op("Unsqueeze", v, g.ints([0])) for v in (logits, target))
    y = g.op("SoftmaxCrossEntropyLoss", logits, target, ignore_index=ignore_index,
             reduction=reduction)
    if label_smoothing:      # + eps / C of -sum(log_softmax) over the counted rows
        ignored = g.op("Equal", target, g.scalar(ignore_index, _dtype.int64))
        valid = g.op("Cast", g.op("Not", ignored), to=g.onnx_type(dt))
        smooth = g.op("Mul", g.op("Neg", g.reduce("ReduceSum", g.op("LogSoftmax", logits,
                                                                    axis=1), [1], False)), valid)
        if reduction != "none":
            axes = list(range(max(len(shape) - 1, 1)))
            smooth = g.reduce("ReduceSum", smooth, axes, False)
            if reduction == "mean":
                smooth = g.op("Div", smooth, g.reduce("ReduceSum", valid, axes, False))
        y = g.op("Add", g.op("Mul", y, g.scalar(1 - label_smoothing, dt)), g.op(
            "Mul", smooth, g.scalar(label_smoothing / shape[1 if len(shape) > 1 else 0], dt)))
    return g.op("Squeeze", y, g.ints([0])) if len(shape) == 1 and reduction == "none" else y


# ---- reductions ------------------------------------------------------------------------------

def _axes(dim, rank):
    if dim is None or dim == () or rank == 0:
        return list(range(rank))
    return [d % rank for d in (dim if isinstance(dim, (tuple, list)) else (dim,))]


@lowering("mean", "sum", "amax", "amin", "prod", "logsumexp")
def _reduce(g, x, dim=None, keepdim=False, dtype=None):
    op = {"mean": "ReduceMean", "sum": "ReduceSum", "amax": "ReduceMax", "amin": "ReduceMin",
          "prod": "ReduceProd", "logsumexp": "ReduceLogSumExp"}[g.node.target.name]
    axes = _axes(dim, len(x.shape))
    if op == "ReduceMean" and 0 in [x.shape[a] for a in axes]:
        g.unsupported("mean over no elements (onnxruntime gives 0, torch nan)")
    return g.reduce(op, g.cast(x, dtype) if dtype is not None else x, axes, keepdim)


@lowering("max", "min")
def _max(g, x, dim=None, keepdim=False):
    red, arg = ("ReduceMax", "ArgMax") if g.node.target.name == "max" else ("ReduceMin", "ArgMin")
    if hasattr(dim, "name"):
        return g.op("Max" if red == "ReduceMax" else "Min", *g.promote(x, dim))
    axes = _axes(dim, len(x.shape))
    v = g.reduce(red, x, axes, keepdim)
    if dim is None:
        return v
    if not axes:        # (a 0-dim input: itself, at index 0)
        return v, g.const(np.array(0, np.int64))
    return v, g.op(arg, x, axis=axes[0], keepdims=int(keepdim))


@lowering("argmax", "argmin")
def _argmax(g, x, dim=None, keepdim=False):
    op = "ArgMax" if g.node.target.name == "argmax" else "ArgMin"
    if dim is None:         # (over the flattened input; keepdim keeps every dim as 1)
        y = g.op(op, g.op("Reshape", x, g.ints([-1])), axis=0, keepdims=0)
        return g.op("Reshape", y, g.ints([1] * len(x.shape) if keepdim else []))
    return g.op(op, x, axis=dim, keepdims=int(keepdim))


@lowering("cumsum")
def _cumsum(g, x, dim, dtype=None):
    return g.op("CumSum", g.cast(x, dtype) if dtype is not None else x,
                g.const(np.array(dim, np.int64)))


# ---- shapes ----------------------------------------------------------------------------------

@lowering("view", "reshape")
def _reshape(g, x, *shape):
    return g.op("Reshape", x, g.ints(_ints(shape)))


@lowering("flatten")
def _flatten(g, x, start_dim=0, end_dim=-1):
    r = len(x.shape)
    s, e = start_dim % max(r, 1), end_dim % max(r, 1)
    return g.op("Reshape", x, g.ints([0] * s + [-1] + list(x.shape[e + 1:])))


@lowering("transpose")
def _transpose(g, x, d0, d1):
    perm = list(range(len(x.shape)))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return g.op("Transpose", x, perm=perm)


@lowering("t")
def _t(g, x):
    return g.op("Transpose", x, perm=[1, 0]) if len(x.shape) == 2 else g.op("Identity", x)


@lowering("permute")
def _permute(g, x, *dims):
    return g.op("Transpose", x, perm=[d % len(x.shape) for d in _ints(dims)])


@lowering("unsqueeze")
def _unsqueeze(g, x, dim):
    return g.op("Unsqueeze", x, g.ints([dim % (len(x.shape) + 1)]))


@lowering("squeeze")
def _squeeze(g, x, dim=None):
    dims = [i for i, s in enumerate(x.shape) if s == 1] if dim is None else \
        [d % len(x.shape) for d in (dim if isinstance(dim, (tuple, list)) else (dim,))
         if x.shape[d] == 1]
    return g.op("Squeeze", x, g.ints(dims)) if dims else g.op("Identity", x)


@lowering("expand")
def _expand(g, x, *sizes):
    sizes = _ints(sizes)
    return g.op("Expand", x, g.ints([1 if s == -1 else s for s in sizes]))


@lowering("cat")
def _cat(g, tensors, dim=0):
    ts = g.promote(*tensors)
    return g.op("Concat", *ts, axis=dim % len(g.out.shape))


@lowering("stack")
def _stack(g, tensors, dim=0):
    d = dim % len(g.out.shape)
    return g.op("Concat", *(g.op("Unsqueeze", t, g.ints([d])) for t in g.promote(*tensors)), axis=d)


@lowering("split")
def _split(g, x, split_size_or_sections, dim=0):
    sizes = [m.shape[dim] for m in g.out]
    return tuple(g.op("Split", x, g.ints(sizes), axis=dim, outs=len(sizes)))


@lowering("matmul", "mm", "bmm")
def _matmul(g, a, b):
    return g.op("MatMul", *g.promote(a, b))


@lowering("tril", "triu")
def _tril(g, x, diagonal=0):
    if g.opset < 14:
        g.unsupported(f"{g.node.target.name} before opset 14 (Trilu)")
    return g.op("Trilu", x, g.const(np.array(diagonal, np.int64)),
                upper=int(g.node.target.name == "triu"))


@lowering("getitem")
def _getitem(g, x, index):
    """Basic indexing: ints, slices, None, Ellipsis; one tensor index (a Gather)."""
    index = index if isinstance(index, tuple) else (index,)
    if any(hasattr(i, "name") for i in index):
        if len(index) == 1:
            return g.op("Gather", x, index[0], axis=0)
        g.unsupported("indexing with a tensor beside other indices")
    n_real = sum(1 for i in index if i is not None and i is not Ellipsis)
    if Ellipsis in index:
        k = index.index(Ellipsis)
        index = index[:k] + (slice(None),) * (len(x.shape) - n_real) + index[k + 1:]
    starts, ends, axes, steps, squeeze, unsqueeze, d, out_d = [], [], [], [], [], [], 0, 0
    for i in index:
        if i is None:
            unsqueeze.append(out_d)
            out_d += 1
            continue
        if isinstance(i, int):
            starts.append(i)
            ends.append(i + 1 if i != -1 else 2 ** 62)
            axes.append(d)
            steps.append(1)
            squeeze.append(d)
        elif isinstance(i, slice):
            if i != slice(None):
                step = 1 if i.step is None else i.step
                starts.append(0 if i.start is None else i.start)
                ends.append(2 ** 62 if i.stop is None else i.stop)
                axes.append(d)
                steps.append(step)
            out_d += 1
        else:
            g.unsupported(f"indexing with {type(i).__name__}")
        d += 1
    y = x
    if axes:
        y = g.op("Slice", y, g.ints(starts), g.ints(ends), g.ints(axes), g.ints(steps))
    if squeeze:
        y = g.op("Squeeze", y, g.ints(squeeze))
    if unsqueeze:
        y = g.op("Unsqueeze", y, g.ints(unsqueeze))
    return y if y is not x else g.op("Identity", x)


@lowering("_lstm_layer")
def _lstm_layer(g, xproj, h0, c0, w_hh, b_hh, reverse=False):
    """ONNX LSTM on the input projections: W is the permutation taking ember's gate order
    (i, f, g, o) to ONNX's (i, o, f, c), so X @ W^T reorders ``xproj``; R is ``w_hh`` with its
    rows gathered the same way (the initializer keeps its state_dict name)."""
    H = h0.shape[-1]
    order = np.concatenate([np.arange(0, H), np.arange(3 * H, 4 * H), np.arange(H, 2 * H),
                            np.arange(2 * H, 3 * H)])
    dt = g.np(xproj.dtype)
    w = g.const(np.eye(4 * H, dtype=dt)[order][None])
    r = g.op("Unsqueeze", g.op("Gather", w_hh, g.ints(order), axis=0), g.ints([0]))
    b = ""
    if b_hh is not None:
        b = g.op("Unsqueeze", g.op("Concat", g.const(np.zeros(4 * H, dt)),
                                   g.op("Gather", b_hh, g.ints(order), axis=0), axis=0),
                 g.ints([0]))
    h, c = (g.op("Unsqueeze", s, g.ints([0])) for s in (h0, c0))
    y, yh, yc = g.op("LSTM", xproj, w, r, b, "", h, c, hidden_size=H, outs=3,
                     direction="reverse" if reverse else "forward")
    return (g.op("Squeeze", y, g.ints([1])), g.op("Squeeze", yh, g.ints([0])),
            g.op("Squeeze", yc, g.ints([0])), None, None)


@lowering("chunk", "unbind")
def _chunk(g, x, chunks_or_dim=0, dim=None):
    dim = chunks_or_dim if g.node.target.name == "unbind" else (dim or 0)
    dim %= len(x.shape)
    sizes = [m.shape[dim] if g.node.target.name == "chunk" else 1 for m in g.out]
    parts = g.op("Split", x, g.ints(sizes), axis=dim, outs=len(sizes))
    parts = [parts] if len(sizes) == 1 else parts
    if g.node.target.name == "unbind":
        parts = [g.op("Squeeze", p, g.ints([dim])) for p in parts]
    return tuple(parts)


@lowering("narrow")
def _narrow(g, x, dim, start, length):
    start %= x.shape[dim] if x.shape[dim] else 1
    return g.op("Slice", x, g.ints([start]), g.ints([start + length]), g.ints([dim]))


@lowering("select")
def _select(g, x, dim, index):
    return g.op("Gather", x, g.const(np.array(index, np.int64)), axis=dim)


@lowering("index_select")
def _index_select(g, x, dim, index):
    return g.op("Gather", x, index, axis=dim)


@lowering("repeat")
def _repeat(g, x, *sizes):
    sizes = _ints(sizes)
    if len(sizes) > len(x.shape):
        x = g.op("Reshape", x, g.ints([1] * (len(sizes) - len(x.shape)) + list(x.shape)))
    return g.op("Tile", x, g.ints(sizes))


@lowering("topk")
def _topk(g, x, k, dim=-1, largest=True, sorted=True):
    if not x.shape:         # (a 0-dim input: itself, at index 0)
        return g.op("Identity", x), g.const(np.array(0, np.int64))
    return tuple(g.op("TopK", x, g.ints([k]), axis=dim, largest=int(largest),
                      sorted=int(sorted), outs=2))


@lowering("sort")
def _sort(g, x, dim=-1, descending=False, stable=False):
    return _topk(g, x, x.shape[dim] if x.shape else 1, dim, bool(descending))


@lowering("addmm")
def _addmm(g, input, mat1, mat2, beta=1, alpha=1):
    return g.op("Gemm", mat1, mat2, input, alpha=float(alpha), beta=float(beta))


@lowering("constant_pad_nd")
def _pad(g, x, pad, value=0):
    n = len(x.shape)
    begins, ends = [0] * n, [0] * n
    for i in range(len(pad) // 2):       # (torch's pad lists the last dim first)
        begins[n - 1 - i], ends[n - 1 - i] = pad[2 * i], pad[2 * i + 1]
    return g.op("Pad", x, g.ints(begins + ends), g.scalar(value, x.dtype))


@lowering("einsum")
def _einsum(g, equation, operands):
    if "..." in equation and len({len(o.shape) for o in operands}) > 1:
        g.unsupported("einsum broadcasting '...' over operands of different ranks")
    return g.op("Einsum", *g.promote(*operands), equation=equation.replace(" ", ""))


@lowering("var", "std")
def _var(g, x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):       # (std(x, False): the unbiased overload, as torch's)
        dim, unbiased = None, dim
    axes = _axes(dim, len(x.shape))
    c = correction if correction is not None else (0 if unbiased is False else 1)
    n = int(np.prod([x.shape[a] for a in axes]))
    d = g.op("Sub", x, g.reduce("ReduceMean", x, axes, 1))
    ss = g.reduce("ReduceSum", g.op("Mul", d, d), axes, keepdim)
    v = g.op("Div", ss, g.scalar(max(n - c, 0), x.dtype))
    return g.op("Sqrt", v) if g.node.target.name == "std" else v


@lowering("norm")
def _norm(g, x, p="fro", dim=None, keepdim=False, dtype=None):
    axes = _axes(dim, len(x.shape))
    if p in (math.inf, -math.inf):
        return g.reduce("ReduceMax" if p > 0 else "ReduceMin", g.op("Abs", x), axes, keepdim)
    if p not in ("fro", 2, 2.0, 1, 1.0):
        g.unsupported(f"norm with p={p!r}")
    return g.reduce("ReduceL1" if p in (1, 1.0) else "ReduceL2", x, _axes(dim, len(x.shape)),
                    keepdim)


@lowering("rms_norm")
def _rms_norm(g, x, normalized_shape, weight=None, eps=None):
    axes = list(range(len(x.shape) - len(normalized_shape), len(x.shape)))
    eps = float(np.finfo(g.np(x.dtype)).eps) if eps is None else eps
    ms = g.reduce("ReduceMean", g.op("Mul", x, x), axes, 1)
    y = g.op("Div", x, g.op("Sqrt", g.op("Add", ms, g.scalar(eps, x.dtype))))
    return y if weight is None else g.op("Mul", y, weight)


@lowering("movedim")
def _movedim(g, x, source, destination):
    n = len(x.shape)
    src = [s % n for s in (source if isinstance(source, (tuple, list)) else (source,))]
    dst = [d % n for d in (destination if isinstance(destination, (tuple, list)) else
                           (destination,))]
    rest = iter(i for i in range(n) if i not in src)
    perm = [src[dst.index(i)] if i in dst else next(rest) for i in range(n)]
    return g.op("Transpose", x, perm=perm)


@lowering("_adaptive_max_pool_nd")
def _adaptive_max_pool(g, x, output_size):
    k = len(output_size)
    ins = x.shape[-k:]
    if any(i % o for i, o in zip(ins, output_size)):
        g.unsupported(f"adaptive max pooling from {tuple(ins)} to {tuple(output_size)} "
                      "(sizes that do not divide)")
    ks = [i // o for i, o in zip(ins, output_size)]
    return g.op("MaxPool", x, kernel_shape=ks, strides=ks), None


@lowering("flip")
def _flip(g, x, dims):
    dims = [d % len(x.shape) for d in (dims if isinstance(dims, (tuple, list)) else (dims,))]
    big = 2 ** 62
    return g.op("Slice", x, g.ints([-1] * len(dims)), g.ints([-big] * len(dims)), g.ints(dims),
                g.ints([-1] * len(dims)))


@lowering("roll")
def _roll(g, x, shifts, dims=None):
    if dims is None:
        from . import V
        flat = V(g.op("Reshape", x, g.ints([-1])), (int(np.prod(x.shape)),), x.dtype)
        return g.op("Reshape", _roll(g, flat, shifts, 0), g.ints(list(x.shape)))
    shifts = shifts if isinstance(shifts, (tuple, list)) else (shifts,)
    dims = dims if isinstance(dims, (tuple, list)) else (dims,)
    y = x
    for s, d in zip(shifts, dims):
        n = x.shape[d]
        s %= n
        if s:
            tail = g.op("Slice", y, g.ints([n - s]), g.ints([n]), g.ints([d]))
            head = g.op("Slice", y, g.ints([0]), g.ints([n - s]), g.ints([d]))
            y = g.op("Concat", tail, head, axis=d % len(x.shape))
    return y


@lowering("index")
def _index(g, x, index):
    """One index tensor (integer: a Gather; boolean of x's shape: unsupported, the result's
    size depends on the data)."""
    index = index if isinstance(index, tuple) else (index,)
    if len(index) == 1 and hasattr(index[0], "name") and index[0].dtype.name != "bool":
        return g.op("Gather", x, index[0], axis=0)
    g.unsupported("advanced indexing beyond one integer index tensor")


# ---- activations with their own OpDefs (ember/_ops/activations.py) ------------------------------

@lowering("silu")
def _silu(g, x):
    return g.op("Mul", x, g.op("Sigmoid", x))


@lowering("mish")
def _mish(g, x):
    return g.op("Mul", x, g.op("Tanh", g.op("Softplus", x)))


@lowering("leaky_relu")
def _leaky_relu(g, x, negative_slope=0.01):
    return g.op("LeakyRelu", x, alpha=float(negative_slope))


@lowering("elu")
def _elu(g, x, alpha=1.0, scale=1.0, input_scale=1.0):
    neg = g.op("Mul", g.op("Sub", g.op("Exp", g.op("Mul", x, g.scalar(input_scale, x.dtype))),
                           g.scalar(1, x.dtype)), g.scalar(alpha * scale, x.dtype))
    pos = g.op("Mul", x, g.scalar(scale, x.dtype))
    return g.op("Where", g.op("Greater", x, g.scalar(0, x.dtype)), pos, neg)


@lowering("celu")
def _celu(g, x, alpha=1.0):
    return _elu(g, x, alpha, 1.0, 1.0 / alpha)


@lowering("hardtanh")
def _hardtanh(g, x, min_val=-1.0, max_val=1.0):
    return g.op("Clip", x, g.scalar(min_val, x.dtype), g.scalar(max_val, x.dtype))


@lowering("hardsigmoid")
def _hardsigmoid(g, x):
    return g.op("HardSigmoid", x, alpha=1 / 6, beta=0.5)


@lowering("hardswish")
def _hardswish(g, x):
    return g.op("HardSwish", x)


@lowering("softplus")
def _softplus(g, x, beta=1.0, threshold=20.0):
    z = g.op("Mul", x, g.scalar(beta, x.dtype))
    soft = g.op("Div", g.op("Softplus", z), g.scalar(beta, x.dtype))
    return g.op("Where", g.op("Greater", z, g.scalar(threshold, x.dtype)), x, soft)


@lowering("logsigmoid")
def _logsigmoid(g, x):
    # min(x, 0) - log1p(exp(-|x|)), as the op computes it (log(sigmoid) underflows)
    one = g.scalar(1, x.dtype)
    tail = g.op("Log", g.op("Add", one, g.op("Exp", g.op("Neg", g.op("Abs", x)))))
    return g.op("Sub", g.op("Min", x, g.scalar(0, x.dtype)), tail)


@lowering("hardshrink", "softshrink")
def _shrink(g, x, lambd=0.5):
    bias = float(lambd) if g.node.target.name == "softshrink" else 0.0
    return g.op("Shrink", x, lambd=float(lambd), bias=bias)


@lowering("threshold")
def _threshold(g, x, threshold, value):
    return g.op("Where", g.op("Greater", x, g.scalar(threshold, x.dtype)), x,
                g.scalar(value, x.dtype))


def _mean(g, x, axes):
    return g.op("ReduceMean", x, g.ints(axes), keepdims=1) if g.opset >= 18 else \
        g.op("ReduceMean", x, axes=axes, keepdims=1)


def _normalized(g, x, axes, eps, dt):
    """``(x - mean) / sqrt(var + eps)`` over ``axes`` (``dt``: x's dtype), with the mean and
    biased variance."""
    mean = _mean(g, x, axes)
    d = g.op("Sub", x, mean)
    var = _mean(g, g.op("Mul", d, d), axes)
    return g.op("Div", d, g.op("Sqrt", g.op("Add", var, g.scalar(eps, dt)))), mean, var


def _per_channel(g, y, weight, bias, rank):
    shape = g.ints([1, -1] + [1] * (rank - 2))
    y = y if weight is None else g.op("Mul", y, g.op("Reshape", weight, shape))
    return y if bias is None else g.op("Add", y, g.op("Reshape", bias, shape))


@lowering("native_batch_norm")
def _batch_norm(g, x, weight, bias, running_mean, running_var, training, eps):
    rank = len(x.shape)
    if training:
        y, mean, var = _normalized(g, x, [0] + list(range(2, rank)), eps, x.dtype)
        c = g.ints([-1])
        return (_per_channel(g, y, weight, bias, rank), g.op("Reshape", mean, c),
                g.op("Reshape", var, c))
    ones = g.const(np.ones(x.shape[1], g.np(x.dtype)))
    zeros = g.const(np.zeros(x.shape[1], g.np(x.dtype)))
    y = g.op("BatchNormalization", x, weight if weight is not None else ones,
             bias if bias is not None else zeros, running_mean, running_var, epsilon=eps)
    return y, g.op("Identity", running_mean), g.op("Identity", running_var)


@lowering("native_group_norm")
def _group_norm(g, x, weight, bias, group, eps):
    y, _, _ = _normalized(g, g.op("Reshape", x, g.ints([0, group, -1])), [2], eps, x.dtype)
    return _per_channel(g, g.op("Reshape", y, g.op("Shape", x)), weight, bias, len(x.shape))


@lowering("round")
def _round(g, x, *, decimals=0):
    if not decimals:
        return g.op("Round", x)
    k = g.scalar(10.0 ** decimals, x.dtype)     # (as the op: round(x * 10^d) / 10^d)
    return g.op("Div", g.op("Round", g.op("Mul", x, k)), k)
