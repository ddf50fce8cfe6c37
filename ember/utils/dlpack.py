"""``torch.utils.dlpack``: zero-copy exchange with other array libraries through DLPack.

``from_dlpack`` takes a tensor or array of another library (or a capsule) and shares its
memory; ``to_dlpack`` (or ``Tensor.__dlpack__``, which consumers call themselves) hands
ember's. See https://pytorch.org/docs/stable/dlpack.html.
"""
from .._dlpack import DLDeviceType, from_dlpack, to_dlpack  # noqa: F401

__all__ = ["DLDeviceType", "from_dlpack"]
