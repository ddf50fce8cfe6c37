"""``ember.nn.attention.flex_attention``: attention with a user's score modification and a
block-sparse mask, as ``torch.nn.attention.flex_attention``, run eagerly.

torch compiles the call into one fused kernel; ember runs torch's own eager reference (its
``math_attention``): scores in float32 (float64 for float64 inputs), ``score_mod`` and
``mask_mod`` applied to every (batch, head, query, key) position, a softmax that gives fully
masked rows zeros, then the product with ``value``. torch calls the mods under ``vmap`` on
0-dim indices; ember calls them once on index tensors shaped to broadcast (``b`` as (B,1,1,1),
``h`` (1,H,1,1), ``q_idx`` (1,1,Q,1), ``kv_idx`` (1,1,1,KV)), which gives the same values for
mods written with pointwise ops and indexing. A ``BlockMask`` holds torch's block tables
(``kv_num_blocks``, ``kv_indices``, their full-block and transposed twins).
"""
import math
from typing import NamedTuple, TypedDict

import ember

__all__ = ["BlockMask", "flex_attention", "AuxOutput", "AuxRequest", "FlexKernelOptions",
           "create_block_mask", "create_mask", "or_masks", "and_masks", "noop_mask"]
_DEFAULT_SPARSE_BLOCK_SIZE = 128


class FlexKernelOptions(TypedDict, total=False):
    """Options for torch's generated kernel (block sizes, warps, stages...); the eager path
    accepts and ignores them, as torch's eager reference does."""
    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    num_stages: int
    PRESCALE_QK: bool
    ROWS_GUARANTEED_SAFE: bool
    BLOCKS_ARE_CONTIGUOUS: bool
    WRITE_DQ: bool
    FORCE_USE_FLEX_ATTENTION: bool
    USE_TMA: bool
    BACKEND: str


class AuxRequest(NamedTuple):
    """Which auxiliary outputs ``flex_attention(..., return_aux=)`` returns.

    Example:
        >>> from ember.nn.attention.flex_attention import AuxRequest
        >>> AuxRequest(lse=True)
        AuxRequest(lse=True, max_scores=False)
    """
    lse: bool = False
    max_scores: bool = False


class AuxOutput(NamedTuple):
    """The auxiliary outputs asked for by an ``AuxRequest`` (None where not asked)."""
    lse: object = None
    max_scores: object = None


def noop_mask(batch, head, token_q, token_kv):
    """The mask_mod that keeps every position.

    Example:
        >>> import ember
        >>> from ember.nn.attention.flex_attention import noop_mask
        >>> i = ember.tensor(0)
        >>> noop_mask(i, i, i, i)
        tensor(True)
    """
    return batch.new_ones(size=(), dtype=ember.bool, device=batch.device)


def _check_mods(mods):
    if not all(callable(m) for m in mods):
        raise RuntimeError(f"All inputs should be callable mask_mods: {mods}")


def and_masks(*mask_mods):
    """The mask_mod keeping the positions every one of ``mask_mods`` keeps.

    Example:
        >>> from ember.nn.attention.flex_attention import and_masks, create_mask
        >>> causal = lambda b, h, q, kv: q >= kv
        >>> near = lambda b, h, q, kv: q - kv < 2
        >>> create_mask(and_masks(causal, near), 1, 1, 3, 3, "cpu")[0, 0].int()
        tensor([[1, 0, 0],
                [1, 1, 0],
                [0, 1, 1]], dtype=torch.int32)
    """
    _check_mods(mask_mods)

    def and_mask(b, h, q_idx, kv_idx):
        result = b.new_ones((), dtype=ember.bool)
        for m in mask_mods:
            result = result & m(b, h, q_idx, kv_idx)
        return result
    return and_mask


def or_masks(*mask_mods):
    """The mask_mod keeping the positions any one of ``mask_mods`` keeps.

    Example:
        >>> from ember.nn.attention.flex_attention import or_masks, create_mask
        >>> first = lambda b, h, q, kv: kv == 0
        >>> diag = lambda b, h, q, kv: q == kv
        >>> create_mask(or_masks(first, diag), None, None, 3, 3, "cpu")[0, 0].int()
        tensor([[1, 0, 0],
                [1, 1, 0],
                [1, 0, 1]], dtype=torch.int32)
    """
    _check_mods(mask_mods)

    def or_mask(b, h, q_idx, kv_idx):
        result = b.new_zeros((), dtype=ember.bool)
        for m in mask_mods:
            result = result | m(b, h, q_idx, kv_idx)
        return result
    return or_mask


def _n_params(fn):
    import inspect
    return len([p for p in inspect.signature(fn).parameters.values()
                if p.default is inspect.Parameter.empty and
                p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])


def _indices(B, H, Q, KV, device):
    return (ember.arange(B, device=device).view(B, 1, 1, 1),
            ember.arange(H, device=device).view(1, H, 1, 1),
            ember.arange(Q, device=device).view(1, 1, Q, 1),
            ember.arange(KV, device=device).view(1, 1, 1, KV))


def create_mask(mod_fn, B, H, Q_LEN, KV_LEN, device=None):
    """The (B, H, Q_LEN, KV_LEN) bool mask of a mask_mod (or of a score_mod: True where it
    leaves the score above -inf); ``B``/``H`` None mean 1.

    Example:
        >>> from ember.nn.attention.flex_attention import create_mask
        >>> create_mask(lambda b, h, q, kv: q >= kv, 1, 1, 2, 2, "cpu").shape
        torch.Size([1, 1, 2, 2])
    """
    B, H = B or 1, H or 1
    device = "cpu" if device is None else device
    idx = _indices(B, H, Q_LEN, KV_LEN, device)
    if _n_params(mod_fn) == 5:
        out = mod_fn(ember.zeros(B, H, Q_LEN, KV_LEN, device=device), *idx)
        return ember.where(ember.isneginf(out), False, True).expand(B, H, Q_LEN, KV_LEN)
    if _n_params(mod_fn) != 4:
        raise AssertionError
    return ember.as_tensor(mod_fn(*idx), device=device).expand(B, H, Q_LEN, KV_LEN).clone()


def _dense_to_ordered(dense):
    dense = dense.to(ember.int32)
    return (dense.sum(-1).to(ember.int32),
            ember.argsort(dense, dim=-1, descending=True, stable=True).to(ember.int32))


def _ordered_to_dense(num_blocks, indices, num_cols):
    keep = ember.arange(indices.shape[-1]) < num_blocks.unsqueeze(-1)
    cols = ember.where(keep, indices.long(), num_cols)
    dense = ember.zeros(*indices.shape[:-1], num_cols + 1, dtype=ember.int32)
    return dense.scatter_(-1, cols, 1)[..., :num_cols].contiguous()


def _transpose_ordered(num_blocks, indices):
    return _dense_to_ordered(_ordered_to_dense(num_blocks, indices,
                                               indices.shape[-1]).transpose(-2, -1))


class BlockMask:
    """Which (query block, key block) tiles an attention visits, in torch's layout:
    ``kv_num_blocks[b, h, i]`` tiles of query block ``i`` listed first in ``kv_indices``
    (partial tiles, where ``mask_mod`` must run), ``full_kv_*`` likewise for tiles wholly kept,
    and the ``q_*`` tables their transposes. Made by :func:`create_block_mask`.

    Example:
        >>> from ember.nn.attention.flex_attention import create_block_mask
        >>> bm = create_block_mask(lambda b, h, q, kv: q >= kv, None, None, 256, 256, "cpu")
        >>> bm.kv_num_blocks, bm.full_kv_num_blocks
        (tensor([[[1, 1]]], dtype=torch.int32), tensor([[[0, 1]]], dtype=torch.int32))
        >>> bm.sparsity()
        25.0
    """

    def __init__(self, seq_lengths, kv_num_blocks, kv_indices, full_kv_num_blocks,
                 full_kv_indices, q_num_blocks, q_indices, full_q_num_blocks, full_q_indices,
                 BLOCK_SIZE=(_DEFAULT_SPARSE_BLOCK_SIZE,) * 2, mask_mod=noop_mask):
        if kv_indices.dim() < 2:
            raise RuntimeError("BlockMask must have at least 2 dimensions")
        self.seq_lengths = tuple(seq_lengths)
        self.kv_num_blocks, self.kv_indices = kv_num_blocks, kv_indices
        self.full_kv_num_blocks, self.full_kv_indices = full_kv_num_blocks, full_kv_indices
        self.q_num_blocks, self.q_indices = q_num_blocks, q_indices
        self.full_q_num_blocks, self.full_q_indices = full_q_num_blocks, full_q_indices
        self.BLOCK_SIZE, self.mask_mod = tuple(BLOCK_SIZE), mask_mod

    @classmethod
    def from_kv_blocks(cls, kv_num_blocks, kv_indices, full_kv_num_blocks=None,
                       full_kv_indices=None, BLOCK_SIZE=_DEFAULT_SPARSE_BLOCK_SIZE,
                       mask_mod=None, seq_lengths=None, compute_q_blocks=True):
        """A BlockMask from its key-block tables; the transposed (query) tables are derived.

        Example:
            >>> import ember
            >>> from ember.nn.attention.flex_attention import BlockMask
            >>> bm = BlockMask.from_kv_blocks(ember.tensor([[[1, 2]]], dtype=ember.int32),
            ...                               ember.tensor([[[[0, 1], [0, 1]]]], dtype=ember.int32))
            >>> bm.shape, bm.q_num_blocks
            ((1, 1, 256, 256), tensor([[[2, 1]]], dtype=torch.int32))
        """
        if kv_indices.dim() < 2:
            raise RuntimeError("BlockMask must have at least 2 dimensions")
        if (full_kv_num_blocks is None) != (full_kv_indices is None):
            raise RuntimeError("full_kv_num_blocks and full_kv_indices must be both provided or "
                               "omitted")
        q = _transpose_ordered(kv_num_blocks, kv_indices) if compute_q_blocks else (None, None)
        fq = (None, None) if full_kv_num_blocks is None or not compute_q_blocks else \
            _transpose_ordered(full_kv_num_blocks, full_kv_indices)
        bs = (BLOCK_SIZE, BLOCK_SIZE) if isinstance(BLOCK_SIZE, int) else tuple(BLOCK_SIZE)
        if seq_lengths is None:
            seq_lengths = (kv_indices.shape[-2] * bs[0], kv_indices.shape[-1] * bs[1])
        return cls(seq_lengths, kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices,
                   *q, *fq, BLOCK_SIZE=bs, mask_mod=noop_mask if mask_mod is None else mask_mod)

    def as_tuple(self, flatten=True):
        """The tables, block sizes and mask_mod, in torch's order.

        Example:
            >>> from ember.nn.attention.flex_attention import create_block_mask
            >>> len(create_block_mask(lambda b, h, q, kv: q >= kv, 1, 1, 4, 4, "cpu").as_tuple())
            13
        """
        bs = self.BLOCK_SIZE if flatten else (self.BLOCK_SIZE,)
        return (*self.seq_lengths, self.kv_num_blocks, self.kv_indices, self.full_kv_num_blocks,
                self.full_kv_indices, self.q_num_blocks, self.q_indices, self.full_q_num_blocks,
                self.full_q_indices, *bs, self.mask_mod)

    @property
    def shape(self):
        """(B, H, Q_LEN, KV_LEN) of the mask."""
        return (*self.kv_indices.shape[:-2], *self.seq_lengths)

    def numel(self):
        """How many (query, key) positions the mask spans."""
        return math.prod(self.shape)

    def sparsity(self):
        """The percentage of positions in tiles the attention skips (# NOTE: as torch's, whole
        tiles count against the unpadded size, so a padded mask can go below zero)."""
        blocks = self.kv_num_blocks.sum().item() + (
            0 if self.full_kv_num_blocks is None else self.full_kv_num_blocks.sum().item())
        return 100 * (1 - blocks * self.BLOCK_SIZE[0] * self.BLOCK_SIZE[1] / self.numel())

    def to_dense(self):
        """The (..., query blocks, key blocks) 0/1 table of visited tiles (int32)."""
        dense = _ordered_to_dense(self.kv_num_blocks, self.kv_indices, self.kv_indices.shape[-1])
        if self.full_kv_num_blocks is not None:
            dense = dense | _ordered_to_dense(self.full_kv_num_blocks, self.full_kv_indices,
                                              self.full_kv_indices.shape[-1])
        return dense

    def to_string(self, grid_size=(20, 20), limit=4):
        """A text picture of the visited tiles per (batch, head): ``█`` full, ``░`` partial."""
        dense = self.to_dense()
        full = ember.zeros_like(dense) if self.full_kv_num_blocks is None else \
            _ordered_to_dense(self.full_kv_num_blocks, self.full_kv_indices,
                              self.full_kv_indices.shape[-1])
        lines = [f"{self.__class__.__name__}(shape={self.shape}, sparsity={self.sparsity():.2f}%,"]
        for bh in list(ember.cartesian_prod(*[ember.arange(n) for n in dense.shape[:-2]])
                       .view(-1, len(dense.shape[:-2])).tolist())[:limit] if \
                dense.dim() > 2 else [[]]:
            lines.append(f"{tuple(bh)}")
            d, f = dense[tuple(bh)][:grid_size[0], :grid_size[1]], \
                full[tuple(bh)][:grid_size[0], :grid_size[1]]
            lines += ["".join("█" if f[i, j] else "░" if d[i, j] else " "
                              for j in range(d.shape[1])) for i in range(d.shape[0])]
        return "\n".join(lines) + "\n)"

    def __getitem__(self, index):
        index = (index,) if not isinstance(index, tuple) else index
        padded = (*index, slice(None), slice(None), slice(None))[:3]
        index = tuple((slice(i + n, i + n + 1) if -n <= i < 0 else slice(i, i + 1))
                      if isinstance(i, int) else i
                      for i, n in zip(padded, self.kv_num_blocks.shape[:3]))
        full = (None, None) if self.full_kv_num_blocks is None else (
            self.full_kv_num_blocks[index], self.full_kv_indices[index])
        return BlockMask.from_kv_blocks(self.kv_num_blocks[index], self.kv_indices[index], *full,
                                        BLOCK_SIZE=self.BLOCK_SIZE, mask_mod=None,
                                        seq_lengths=self.seq_lengths)

    def to(self, device):
        """This mask with its tables on ``device``."""
        moved = [t.to(device) if isinstance(t, ember.Tensor) else t
                 for t in self.as_tuple(flatten=False)[2:10]]
        return BlockMask(self.seq_lengths, *moved, BLOCK_SIZE=self.BLOCK_SIZE,
                         mask_mod=self.mask_mod)

    def __repr__(self):
        def shape(x):
            return None if x is None else x.shape
        return (f"BlockMask(\n    kv_num_blocks={self.kv_num_blocks.shape},\n    "
                f"kv_indices={self.kv_indices.shape},\n    "
                f"full_kv_num_blocks={shape(self.full_kv_num_blocks)},\n    "
                f"full_kv_indices={shape(self.full_kv_indices)},\n    "
                f"q_num_blocks={shape(self.q_num_blocks)},\n    "
                f"q_indices={shape(self.q_indices)},\n    "
                f"full_q_num_blocks={shape(self.full_q_num_blocks)},\n    "
                f"full_q_indices={shape(self.full_q_indices)},\n    "
                f"BLOCK_SIZE={self.BLOCK_SIZE},\n    shape={self.shape},\n    "
                f"sparsity={self.sparsity():.2f}%,\n    "
                f"mask_mod={getattr(self.mask_mod, '__name__', self.mask_mod)}\n)")


def create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device=None,
                      BLOCK_SIZE=_DEFAULT_SPARSE_BLOCK_SIZE, _compile=False,
                      separate_full_blocks=True, compute_dq_write_order=False, dq_kv_order=True):
    """The BlockMask of ``mask_mod`` over (B, H, Q_LEN, KV_LEN) in tiles of ``BLOCK_SIZE``
    (one int, or (query, key)); ``B``/``H`` None broadcast over batches and heads.

    Example:
        >>> from ember.nn.attention.flex_attention import create_block_mask
        >>> bm = create_block_mask(lambda b, h, q, kv: q >= kv, 2, 1, 256, 384, "cpu")
        >>> bm.kv_indices.shape, bm.shape
        (torch.Size([2, 1, 2, 3]), (2, 1, 256, 384))
    """
    if _n_params(mask_mod) != 4:
        raise AssertionError(f"create-block_mask requires a mask_mod function! Got {mask_mod}")
    qb, kb = (BLOCK_SIZE, BLOCK_SIZE) if isinstance(BLOCK_SIZE, int) else BLOCK_SIZE
    mask = create_mask(mask_mod, B, H, Q_LEN, KV_LEN, device)
    mask = ember.nn.functional.pad(mask, (0, -KV_LEN % kb, 0, -Q_LEN % qb))
    b, h, q, kv = mask.shape
    sums = mask.view(b, h, q // qb, qb, kv // kb, kb).permute(0, 1, 2, 4, 3, 5).sum(dim=[-2, -1])
    full = (sums == qb * kb) if separate_full_blocks else None
    partial = ((sums > 0) & (sums < qb * kb)) if separate_full_blocks else sums > 0
    full = (None, None) if full is None else _dense_to_ordered(full)
    return BlockMask.from_kv_blocks(*_dense_to_ordered(partial), *full, BLOCK_SIZE=(qb, kb),
                                    mask_mod=mask_mod, seq_lengths=(Q_LEN, KV_LEN))


def _identity(score, b, h, q_idx, kv_idx):
    return score


def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None,
                   enable_gqa=False, return_lse=False, kernel_options=None, *, return_aux=None):
    """``softmax(score_mod(q k^T * scale) masked by block_mask) v`` on (B, H, L, E) operands:
    the attention of torch's flex_attention, with its eager reference's numbers. ``enable_gqa``
    lets ``H`` be a multiple of the key/value heads; ``return_lse`` (or ``return_aux``) also
    returns the per-query log-sum-exp (and maximum score).

    Example:
        >>> import ember
        >>> from ember.nn.attention.flex_attention import flex_attention
        >>> q = ember.ones(1, 2, 4, 8)
        >>> bias = lambda score, b, h, q_idx, kv_idx: score + (q_idx - kv_idx)
        >>> flex_attention(q, q, q, score_mod=bias).shape
        torch.Size([1, 2, 4, 8])
    """
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise NotImplementedError("NYI: query, key, and value must be 4D tensors")
    if (key.shape[-1] != query.shape[-1]):
        raise ValueError(f"Expect query and key/value to have the same embedding dimension but "
                         f"got E={query.shape[-1]} and E={key.shape[-1]}.")
    Hq, Hkv = query.shape[1], key.shape[1]
    if not enable_gqa and Hq != Hkv:
        raise ValueError(f"Expect query and key/value to have the same number of heads but got "
                         f"Hq={Hq} and Hkv={Hkv}. Try setting enable_gqa=True for GQA.")
    if enable_gqa and Hq % Hkv:
        raise ValueError(f"Expect number of query heads to be a multiple of kv heads for GQA "
                         f"but got Hq={Hq} and Hkv={Hkv}.")
    if return_lse and return_aux is not None:
        raise ValueError("Cannot specify both return_lse and return_aux. return_lse is "
                         "deprecated, please use return_aux=AuxRequest(lse=True)")
    if return_lse:
        import warnings
        warnings.warn("return_lse is deprecated and will be removed in v2.10. Please use "
                      "return_aux=AuxRequest(lse=True) instead.", FutureWarning, stacklevel=2)
    Bq, Bkv = query.shape[0], key.shape[0]
    if not (Bq == Bkv or (Bq > 1 and Bkv == 1)):
        raise RuntimeError(f"Bq and Bkv must broadcast. Got Bq={Bq} and Bkv={Bkv}")
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    key = key.repeat_interleave(Hq // Hkv, 1).expand(Bq, -1, -1, -1)
    value = value.repeat_interleave(Hq // Hkv, 1).expand(Bq, -1, -1, -1)
    work = ember.float64 if query.dtype is ember.float64 else ember.float32
    scores = (query.to(work) @ key.to(work).transpose(-2, -1)) * scale
    idx = _indices(*scores.shape, query.device)
    mask_mod = noop_mask if block_mask is None else block_mask.mask_mod
    kept = ember.as_tensor(mask_mod(*idx), device=query.device)
    scores = ember.where(kept, (score_mod or _identity)(scores, *idx),
                         ember.tensor(-math.inf, dtype=work, device=query.device))
    lse = scores.logsumexp(-1)
    masked = (scores == -math.inf).all(-1)
    lse = ember.where(masked, -math.inf, lse)
    max_scores = scores.max(-1)[0]
    # NOTE: as torch's safe softmax, a row masked throughout attends to nothing (zeros)
    probs = ember.where(masked.unsqueeze(-1), 0.0, ember.softmax(scores, -1))
    out = probs.to(query.dtype) @ value.to(query.dtype)
    if return_aux is not None:
        return out, AuxOutput(lse if return_aux.lse else None,
                              max_scores if return_aux.max_scores else None)
    return (out, lse) if return_lse else out
