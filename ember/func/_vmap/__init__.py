"""vmap's batching: a ``BatchedTensor`` holds a tensor with one more (leading) dim per vmap
level, and shows the per-example ("logical") shape (batched.py); while a vmap runs, dispatch's
transform hook (shared with forward-mode AD: autograd/forward_ad.py) sends every op with a
BatchedTensor operand to its batching rule, which runs the op once on the whole batch
(dispatch.py). Rules are derived from the op (pointwise ops broadcast, ops with a dim option
shift it past the batch dim: generic.py) or written by op family (shape, linalg, nn, index,
statistics); an op without one loops over the batch, with torch's performance warning. Random
functions follow vmap's ``randomness`` (randomness.py). Autograd only ever sees the physical
tensors, so ``grad`` inside vmap differentiates the batched computation in one backward pass."""
from .batched import (_STACK, BatchedTensor, _level_of, _wrap, batched_over, lift,  # noqa: F401
                      lower, unbatched_over)
from .dispatch import pop, push  # noqa: F401
from .generic import LOOPED  # noqa: F401
