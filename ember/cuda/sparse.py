"""``torch.cuda.sparse``: the legacy sparse CUDA tensor types (``torch.cuda.sparse.FloatTensor``
& co.), as constructors of sparse COO tensors on the GPU and ``isinstance`` targets.

Example:
    >>> import ember
    >>> isinstance(ember.ones(2), ember.cuda.sparse.FloatTensor)
    False
"""
from .._tensor_types import _NAMES, _legacy_type

# (torch.cuda.sparse has no BoolTensor)
globals().update({n + "Tensor": _legacy_type(n, d, True, True) for n, d in _NAMES.items()
                  if n != "Bool"})
