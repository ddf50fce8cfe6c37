"""torch.types: the aliases PyTorch's own type hints (and users' annotations) name."""
import builtins
import os
from typing import IO, Optional, Sequence, Union

from ._device import device
from ._dtype import dtype
from ._size import Size
from ._storage import UntypedStorage
from ._tensor import Tensor

_int, _float, _bool, _complex = builtins.int, builtins.float, builtins.bool, builtins.complex
_dtype, _device = dtype, device
_size = Union[Size, list[builtins.int], tuple[builtins.int, ...]]
_TensorOrTensors = Union[Tensor, Sequence[Tensor]]
Number = Union[builtins.int, builtins.float, builtins.bool]
Device = Optional[Union[device, str, builtins.int]]
Storage = UntypedStorage
FileLike = Union[str, os.PathLike, IO[bytes]]
