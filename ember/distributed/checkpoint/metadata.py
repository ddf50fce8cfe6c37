"""What a checkpoint's ``.metadata`` file holds, with ``torch.distributed.checkpoint.metadata``'s
names: for every flattened key, a tensor's global size, dtype and the chunks saved of it
(``TensorStorageMetadata``), or ``BytesStorageMetadata`` for any other value; and where each
chunk or value lies (``storage_data``: ``MetadataIndex`` -> ``_StorageInfo``).

Example:
    >>> from ember.distributed.checkpoint.metadata import ChunkStorageMetadata
    >>> ChunkStorageMetadata(offsets=(2, 0), sizes=(2, 3))
    ChunkStorageMetadata(offsets=(2, 0), sizes=(2, 3))
"""
from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass(frozen=True)
class ChunkStorageMetadata:
    """A box of a tensor: the global index of its first element per dim, and its size."""
    offsets: tuple
    sizes: tuple


@dataclass
class TensorProperties:
    """The dtype (and torch's other creation flags) of a saved tensor."""
    dtype: Any = None
    layout: Any = None
    requires_grad: bool = False
    memory_format: Any = None
    pin_memory: bool = False


@dataclass
class TensorStorageMetadata:
    """A saved tensor: its properties, global ``size`` and the ``chunks`` the files hold."""
    properties: TensorProperties
    size: tuple
    chunks: list


@dataclass
class BytesStorageMetadata:
    """A saved non-tensor value (serialized with ``ember.save``)."""


@dataclass(frozen=True)
class MetadataIndex:
    """Names one saved item: its flattened key and, for a tensor chunk, the chunk's offsets."""
    fqn: str
    offset: Optional[tuple] = None
    index: Optional[int] = field(default=None, hash=False, compare=False)


@dataclass
class _StorageInfo:
    """Where an item's bytes are: a file of the checkpoint directory, offset and length."""
    relative_path: str
    offset: int
    length: int


@dataclass
class Metadata:
    """The contents of ``.metadata``: ``state_dict_metadata`` (key -> tensor or bytes
    metadata), ``planner_data`` (key -> its path in the nested state dict) and
    ``storage_data`` (``MetadataIndex`` -> ``_StorageInfo``)."""
    state_dict_metadata: dict
    planner_data: Any = None
    storage_data: Any = None
    version: str = "ember-dcp-1"
