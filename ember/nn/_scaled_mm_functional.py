"""``F.scaled_mm`` (float8 GEMM with tensor-wise or row-wise scales), ``F.grouped_mm`` (the
jagged per-expert GEMMs of mixture-of-experts layers) and ``F.scaled_grouped_mm``, with torch
2.13's CPU behaviour: float32 math rounded once to the output dtype, and torch's checks."""
import enum

import ember

from .. import _dtype
from ..autograd.composite import recorded_as

__all__ = ["ScalingType", "SwizzleType", "scaled_mm", "grouped_mm", "scaled_grouped_mm"]


class ScalingType(enum.IntEnum):
    """How a float8 operand's scale applies: one scale for the tensor, one per row, or per
    block."""
    TensorWise = 0
    RowWise = 1
    BlockWise1x16 = 2
    BlockWise1x32 = 3
    BlockWise1x128 = 4
    BlockWise128x128 = 5


class SwizzleType(enum.IntEnum):
    """The memory layout of block scales (a GPU kernel's concern; the CPU reads scales plainly)."""
    NO_SWIZZLE = 0
    SWIZZLE_32_4_4 = 1


ScalingType.__name__, SwizzleType.__name__ = "_ScalingType", "_SwizzleType"     # (torch's)
_F8 = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")


def _one(x):
    return x[0] if isinstance(x, (list, tuple)) and len(x) == 1 else x


def _scaling_ok(a, sa, ra, b, sb, rb):
    if not (a.dtype.name in _F8 and b.dtype.name in _F8 and isinstance(sa, ember.Tensor) and
            isinstance(sb, ember.Tensor) and sa.dtype is sb.dtype is _dtype.float32):
        return False
    if ra == rb == ScalingType.TensorWise:
        return sa.numel() == 1 and sb.numel() == 1
    return ra == rb == ScalingType.RowWise and tuple(sa.shape) == (a.shape[0], 1) and \
        tuple(sb.shape) == (1, b.shape[1]) and sa.is_contiguous() and sb.is_contiguous()


def _scaling_error(a, sa, b, sb):
    def desc(t):
        return (_dtype._SCALAR_NAMES[t.dtype.name], list(t.shape), list(t.stride())) \
            if isinstance(t, ember.Tensor) else ("?", "?", "?")
    (da, za, ta), (db, zb, tb) = desc(sa), desc(sb)
    return ValueError(
        "Invalid scaling configuration.\n- For TensorWise scaling, a and b should be float8, "
        "scales should be float and singletons.\n- For RowWise scaling, a and b should be "
        f"float8, scales should be float, scale_a should be ({a.shape[0]}, 1) and scale_b "
        f"should be (1, {b.shape[1]}), and both should be contiguous.\nGot mat_a.dtype()="
        f"{_dtype._SCALAR_NAMES[a.dtype.name]}, scale_a.dtype()={da}, scale_a.size()={za}, "
        f"scale_a.stride()={ta}, mat_b.dtype()={_dtype._SCALAR_NAMES[b.dtype.name]}, "
        f"scale_b.dtype()={db}, scale_b.size()={zb} and scale_b.stride()={tb}")


def scaled_mm(mat_a, mat_b, scale_a, scale_recipe_a, scale_b, scale_recipe_b, swizzle_a=None,
              swizzle_b=None, bias=None, output_dtype=_dtype.bfloat16, contraction_dim=(),
              use_fast_accum=False):
    """``(mat_a * scale_a) @ (mat_b * scale_b) + bias`` for float8 matrices, computed in float32
    and rounded once to ``output_dtype`` (``mat_a``'s dtype when None). Scales are float32:
    one each (``ScalingType.TensorWise``) or one per row of ``mat_a`` (M, 1) and per column of
    ``mat_b`` (1, N) (``RowWise``); torch's CPU kernel takes no block scales. ``swizzle_*`` and
    ``use_fast_accum`` concern GPU kernels and change nothing here.

    Example:
        >>> F = ember.nn.functional
        >>> a = ember.ones(2, 4).to(ember.float8_e4m3fn)
        >>> s = ember.tensor(0.5)
        >>> F.scaled_mm(a, a.t(), s, F.ScalingType.TensorWise, s, F.ScalingType.TensorWise)
        tensor([[1., 1.],
                [1., 1.]], dtype=torch.bfloat16)
    """
    sa, ra, sb, rb = _one(scale_a), _one(scale_recipe_a), _one(scale_b), _one(scale_recipe_b)
    for name, m in (("mat_a", mat_a), ("mat_b", mat_b)):
        if m.dim() != 2:
            raise ValueError(f"{name} must be a matrix")
    if mat_a.shape[1] != mat_b.shape[0]:
        raise ValueError(f"mat_a and mat_b shapes cannot be multiplied ({mat_a.shape[0]}x"
                         f"{mat_a.shape[1]} and {mat_b.shape[0]}x{mat_b.shape[1]})")
    if not _scaling_ok(mat_a, sa, ra, mat_b, sb, rb):
        raise _scaling_error(mat_a, sa, mat_b, sb)
    if bias is not None and bias.numel() != mat_b.shape[1]:
        raise ValueError(f"Bias must be size {mat_b.shape[1]} but got {bias.numel()}")
    out = (mat_a.float() * sa.reshape(-1, 1) if ra == ScalingType.RowWise else
           mat_a.float() * sa.reshape(())) @ (mat_b.float() * sb.reshape(1, -1) if rb ==
                                               ScalingType.RowWise else
                                               mat_b.float() * sb.reshape(()))
    if bias is not None:
        out = out + bias.float()
    return out.to(mat_a.dtype if output_dtype is None else output_dtype)


_C10 = {"float32": "float", "float16": "c10::Half", "bfloat16": "c10::BFloat16"}


def _grouped_checks(a, b, offs, bias, out_dtype):
    for name, m in (("mat_a", a), ("mat_b", b)):
        if m.dim() not in (2, 3):
            raise RuntimeError(f"{name} has to be 2 or 3d")
        if m.dtype.name not in _C10:
            raise RuntimeError(f"Expected {name} to be Float32, BFloat16 or Float16 matrix, "
                               f"got {_dtype._SCALAR_NAMES[m.dtype.name]}")
    for m in (a, b):
        st = m.stride()[-2:]
        # NOTE: torch's CPU kernel keeps the GPU kernels' layout rule: one unit stride, the
        # other a multiple of 16 bytes
        if 1 not in st or (max(st) * m.dtype.itemsize) % 16:
            raise RuntimeError("strides should be multiple of 16 bytes")
    if (offs is None) != (a.dim() == 3 and b.dim() == 3):
        raise RuntimeError("Have to provide offsets if there is a 2d matrix, or no offset if "
                           "both matrices are 3d")
    if offs is not None and offs.dtype is not _dtype.int32:
        raise RuntimeError("Offsets have to be int32")
    if bias is not None:
        raise RuntimeError("Bias not supported yet")
    if out_dtype is not None and out_dtype is not a.dtype:
        raise RuntimeError("Grouped gemm output dtype must match `mat_a` dtype")
    if b.dtype is not a.dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {_C10[b.dtype.name]}, but got "
                           f"{_C10[a.dtype.name]} instead")
    if a.shape[-1] != b.shape[-2]:
        raise RuntimeError("contraction dimension of mat_a and mat_b must match")
    if a.dim() == 3 and b.dim() == 3 and a.shape[0] != b.shape[0]:
        raise RuntimeError("batched dimension has to match")
    groups = {(2, 3): b.shape[0], (3, 2): a.shape[0]}.get((a.dim(), b.dim()))
    if groups is not None and offs.shape[0] != groups:
        raise RuntimeError("matrix batch sizes have to match")


@recorded_as("GroupedMmBackward0")
def _grouped(mat_a, mat_b, offs):
    a, b = mat_a.float(), mat_b.float()
    if offs is None:                    # (G, M, K) @ (G, K, N)
        return (a @ b).to(mat_a.dtype)
    ends = [int(e) for e in offs.tolist()]
    starts = [0] + ends[:-1]
    if a.dim() == 2 and b.dim() == 3:   # rows of a in groups: (M, K) -> (M, N)
        out = ember.zeros(a.shape[0], b.shape[-1], dtype=a.dtype, device=a.device)
        parts = [a[s:e] @ b[g] for g, (s, e) in enumerate(zip(starts, ends))]
        out = ember.cat(parts + [out[ends[-1]:]]) if parts else out
    elif a.dim() == 3:                  # columns of b in groups: (M, N)
        parts = [a[g] @ b[:, s:e] for g, (s, e) in enumerate(zip(starts, ends))]
        out = ember.cat(parts + [ember.zeros(a.shape[1], b.shape[1] - ends[-1], dtype=a.dtype,
                                             device=a.device)], 1)
    else:                               # the shared K in groups: (G, M, N)
        out = ember.stack([a[:, s:e] @ b[s:e] for s, e in zip(starts, ends)])
    return out.to(mat_a.dtype)


def grouped_mm(mat_a, mat_b, *, offs=None, bias=None, out_dtype=None):
    """One GEMM per group: with both operands 3-D, ``mat_a[g] @ mat_b[g]``; a 2-D operand is
    cut into groups by the int32 ``offs`` (each group's end): the rows of a 2-D ``mat_a``
    (each group times ``mat_b[g]``), the columns of a 2-D ``mat_b``, or the shared dimension
    K of two 2-D operands (a (G, M, N) result). float32, float16 or bfloat16, computed in
    float32; rows or columns past ``offs[-1]`` are zero.

    Example:
        >>> F = ember.nn.functional
        >>> a, b = ember.ones(5, 4), ember.ones(2, 4, 4)
        >>> F.grouped_mm(a, b, offs=ember.tensor([2, 5], dtype=ember.int32))[:, 0]
        tensor([4., 4., 4., 4., 4.])
    """
    _grouped_checks(mat_a, mat_b, offs, bias, out_dtype)
    return _grouped(mat_a, mat_b, offs)


def scaled_grouped_mm(mat_a, mat_b, scale_a, scale_recipe_a, scale_b, scale_recipe_b,
                      swizzle_a=None, swizzle_b=None, bias=None, offs=None,
                      output_dtype=_dtype.bfloat16, contraction_dim=(), use_fast_accum=False):
    """``grouped_mm`` of float8 operands with scales: as in torch 2.13, there is no CPU
    kernel, so it raises (torch runs it on CUDA GPUs only)."""
    raise NotImplementedError(
        "Could not run 'aten::_scaled_grouped_mm_v2' with arguments from the "
        f"'{mat_a.device.type.upper()}' backend. This could be because the operator doesn't "
        "exist for this backend, or was omitted during the selective/custom build process (if "
        "using custom build).")
