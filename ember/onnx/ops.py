"""``torch.onnx.ops``: operators that stand for an ONNX node in the exported graph.

``symbolic("domain::Op", inputs, attrs, dtype=, shape=)`` computes nothing in eager mode (it
returns zeros of the declared shape and dtype, as torch's does); ``ember.onnx.export`` writes
it as one node ``Op`` of ``domain`` with those attributes, the domain added to the model's
opset imports (at ``version``). ``symbolic_multi_out`` is the same with several outputs. ``rotary_embedding`` and
``attention`` compute ONNX's RotaryEmbedding-23 and Attention-23 in ember ops (the reference
torch's are), so they are recorded and exported as those ops, at any opset.
"""
import math

from .._ops.registry import OpDef

__all__ = ["symbolic", "symbolic_multi_out", "rotary_embedding", "attention"]


def _np(dtype):
    if isinstance(dtype, int):
        from ._custom import JitScalarType
        dtype = JitScalarType.from_onnx_type(dtype).dtype()
    return dtype.np


def _fwd(xp, domain_op, inputs, attrs=None, dtype=None, shape=(), version=None,
         metadata_props=None):
    return xp.zeros(tuple(shape), dtype=_np(dtype))


def _fwd_multi(xp, domain_op, inputs, attrs=None, dtypes=(), shapes=(), version=None,
               metadata_props=None):
    return tuple(xp.zeros(tuple(s), dtype=_np(d)) for s, d in zip(shapes, dtypes))


def _lower(g, domain_op, inputs, attrs, version, n):
    from ._custom import GraphContext
    domain = domain_op.rpartition("::")[0]
    if domain and version is not None:
        g.domains[domain] = version
    out = GraphContext(g).op(domain_op, *inputs, outputs=n, **dict(attrs or {}))
    return out.name if n == 1 else tuple(v.name for v in out)


_symbolic = OpDef("onnx_symbolic", _fwd, differentiable=False, method=False, function=False)
_symbolic_multi = OpDef("onnx_symbolic_multi_out", _fwd_multi, differentiable=False,
                        method=False, function=False)
_symbolic.onnx = lambda g, d, ins, attrs=None, dtype=None, shape=(), version=None, \
    metadata_props=None: _lower(g, d, ins, attrs, version, 1)
_symbolic_multi.onnx = lambda g, d, ins, attrs=None, dtypes=(), shapes=(), version=None, \
    metadata_props=None: _lower(g, d, ins, attrs, version, len(shapes))


def _check(domain_op):
    if "::" not in domain_op:
        raise ValueError(f"domain_op must be in the format 'domain::op', got {domain_op!r}")


def symbolic(domain_op, /, inputs, attrs=None, *, dtype, shape, version=None, metadata_props=None):
    """One ONNX node ``domain::Op`` on ``inputs`` with ``attrs`` in the exported graph; in
    eager mode, zeros of ``shape`` and ``dtype``.

    Example:
        >>> import ember
        >>> ember.onnx.ops.symbolic("custom::Foo", (ember.ones(2),), {"alpha": 1.0},
        ...                         dtype=ember.float32, shape=(2,))
        tensor([0., 0.])
    """
    _check(domain_op)
    return _symbolic(domain_op, list(inputs), dict(attrs or {}), dtype=dtype,
                     shape=[int(s) for s in shape], version=version, metadata_props=metadata_props)


def symbolic_multi_out(domain_op, /, inputs, attrs=None, *, dtypes, shapes, version=None,
                       metadata_props=None):
    """``symbolic`` with several outputs (one per dtype and shape).

    Example:
        >>> import ember
        >>> a, b = ember.onnx.ops.symbolic_multi_out(
        ...     "custom::Split2", (ember.ones(4),), dtypes=(ember.float32, ember.int64),
        ...     shapes=((2,), (2,)))
        >>> b
        tensor([0, 0])
    """
    _check(domain_op)
    if len(dtypes) != len(shapes):
        raise ValueError(f"Number of dtypes ({len(dtypes)}) must match number of shapes "
                         f"({len(shapes)})")
    return list(_symbolic_multi(domain_op, list(inputs), dict(attrs or {}), dtypes=list(dtypes),
                                shapes=[[int(s) for s in sh] for sh in shapes], version=version,
                                metadata_props=metadata_props))


def _need(cond, msg):
    if not cond:
        raise RuntimeError(msg)


def rotary_embedding(X, cos_cache, sin_cache, position_ids=None, *, interleaved=False,
                     num_heads=0, rotary_embedding_dim=0):
    """ONNX's RotaryEmbedding-23: rotate ``X`` ((batch, heads, seq, head) or (batch, seq,
    hidden) with ``num_heads``) by the cos/sin caches (indexed by ``position_ids`` when
    given), all or its first ``rotary_embedding_dim`` features, halves or ``interleaved``
    pairs.

    Example:
        >>> import ember
        >>> x = ember.ones(1, 1, 2, 2)
        >>> c, s = ember.ones(1, 2, 1), ember.zeros(1, 2, 1)
        >>> ember.onnx.ops.rotary_embedding(x, c, s).shape
        torch.Size([1, 1, 2, 2])
    """
    import ember
    shape, rank = X.shape, X.dim()
    b, seq = shape[0], shape[-2]
    if position_ids is not None:
        _need(position_ids.dim() == 2 and tuple(position_ids.shape) == (b, seq),
              f"position_ids must be 2D (batch, sequence) = ({b}, {seq}). Received shape "
              f"{position_ids.shape}")
        _need(cos_cache.dim() == 2 and sin_cache.dim() == 2, "cos_cache/sin_cache must be 2D "
              "when position_ids is provided. Received cos_cache shape "
              f"{cos_cache.shape}, sin_cache shape {sin_cache.shape}")
        cos, sin = cos_cache[position_ids], sin_cache[position_ids]
    else:
        _need(cos_cache.dim() == 3 and sin_cache.dim() == 3, "cos_cache/sin_cache must be 3D "
              "when position_ids is not provided. Received cos_cache shape "
              f"{cos_cache.shape}, sin_cache shape {sin_cache.shape}")
        cos, sin = cos_cache, sin_cache
    if rank == 4:
        X = X.permute(0, 2, 1, 3)
    else:
        _need(num_heads != 0, "num_heads must be provided for 3D inputs. Received input tensor "
              f"with shape {shape}")
        X = X.reshape(b, seq, num_heads, shape[2] // num_heads)
    d = rotary_embedding_dim or X.shape[3]
    rot, rest = X[..., :d], X[..., d:]
    _need(tuple(cos.shape[:2]) == (b, seq) and cos.shape[-1] == d // 2,
          f"cos has shape {cos.shape} but expected (batch={b}, seq={seq}, {d // 2})")
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    x1, x2 = (rot[..., 0::2], rot[..., 1::2]) if interleaved else rot.chunk(2, dim=-1)
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    rot = ember.stack((real, imag), -1).reshape(rot.shape) if interleaved else \
        ember.cat((real, imag), -1)
    out = ember.cat((rot, rest), -1)
    return out.reshape(shape) if rank == 3 else out.permute(0, 2, 1, 3)


def attention(Q, K, V, attn_mask=None, past_key=None, past_value=None, *, is_causal=False,
              kv_num_heads=0, q_num_heads=0, qk_matmul_output_mode=0, scale=None, softcap=0.0,
              softmax_precision=None):
    """ONNX's Attention-23: ``(output, present_key, present_value, qk_output)`` of scaled dot
    product attention with grouped heads, boolean or additive masks, causal masking, a key and
    value cache, soft capping, and the scores at stage ``qk_matmul_output_mode`` (0: Q K^T,
    1: + bias, 2: capped, 3: softmax).

    Example:
        >>> import ember
        >>> q = ember.ones(1, 2, 3, 4)
        >>> out, k, v, qk = ember.onnx.ops.attention(q, q, q, is_causal=True)
        >>> out.shape, qk.shape
        (torch.Size([1, 2, 3, 4]), torch.Size([1, 2, 3, 3]))
    """
    import ember
    b, three_d = Q.shape[0], Q.dim() == 3
    if three_d:
        _need(q_num_heads != 0 and kv_num_heads != 0,
              "q_num_heads and kv_num_heads must be provided for 3D inputs")
        Q, K, V = (t.reshape(b, t.shape[1], n, t.shape[2] // n).transpose(1, 2)
                   for t, n in ((Q, q_num_heads), (K, kv_num_heads), (V, kv_num_heads)))
    K = ember.cat([past_key, K], 2) if past_key is not None else K.clone()
    V = ember.cat([past_value, V], 2) if past_value is not None else V.clone()
    present_key, present_value = K, V
    hq, hk, lq, lk = Q.shape[1], K.shape[1], Q.shape[2], K.shape[2]
    _need(hq % hk == 0, f"q_num_heads ({hq}) must be divisible by kv_num_heads ({hk}) for GQA")
    if hq != hk:
        K, V = K.repeat_interleave(hq // hk, 1), V.repeat_interleave(hq // hk, 1)
    bias = ember.zeros(lq, lk, dtype=Q.dtype)
    if is_causal:
        _need(attn_mask is None, "Cannot use both is_causal and attn_mask")
        bias = bias.masked_fill(~ember.ones(lq, lk, dtype=ember.bool).tril(), float("-inf"))
    if attn_mask is not None:
        bias = bias.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == ember.bool \
            else bias + attn_mask
    s = math.sqrt(scale if scale is not None else 1 / math.sqrt(Q.shape[3]))
    qk = (Q * s) @ (K * s).transpose(-2, -1)
    scores = qk + bias
    stages = [qk, scores]
    if softcap > 0.0:
        scores = softcap * ember.tanh(scores / softcap)
    stages.append(scores)
    if softmax_precision is not None:
        from ._custom import JitScalarType
        scores = scores.to(JitScalarType.from_onnx_type(softmax_precision).dtype())
    p = scores.softmax(-1).to(Q.dtype)
    out = p @ V
    stages.append(p)
    if three_d:
        out = out.transpose(1, 2).reshape(b, lq, -1)
    return out, present_key, present_value, stages[qk_matmul_output_mode]
