"""Checkpoint storage in a directory, as ``torch.distributed.checkpoint``'s
``FileSystemWriter`` / ``FileSystemReader``.

Layout: ``__{rank}_0.distcp`` per rank (tensor chunks as raw C-order bytes, other values as
``ember.save`` blobs, back to back) and one ``.metadata`` (a pickled ``Metadata``) that the
coordinator writes last. Every file is written under a temporary name, flushed (fsync'ed with
``sync_files``) and renamed, and ``.metadata`` is removed before a save writes new shards, so
a directory holds either a complete checkpoint or none that ``load`` accepts.
"""
import io
import os
import pickle

import numpy as np

from .metadata import MetadataIndex, _StorageInfo

_METADATA = ".metadata"


def _atomic_write(path, chunks, sync):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        for c in chunks:
            f.write(c)
        f.flush()
        if sync:
            os.fsync(f.fileno())
    os.replace(tmp, path)


class FileSystemWriter:
    """Writes a checkpoint into the directory ``path`` (created if missing).

    ``single_file_per_rank=False`` writes one file per item instead of one per rank;
    ``sync_files`` fsyncs each file before renaming it into place; ``overwrite=False`` refuses
    a directory that already holds a checkpoint.

    Example:
        >>> import ember, os, tempfile
        >>> import ember.distributed.checkpoint as dcp
        >>> d = tempfile.mkdtemp()
        >>> _ = dcp.save({"w": ember.ones(2)}, storage_writer=dcp.FileSystemWriter(d))
        >>> sorted(os.listdir(d))
        ['.metadata', '__0_0.distcp']
    """

    def __init__(self, path, single_file_per_rank=True, sync_files=True, thread_count=1,
                 per_thread_copy_ahead=10_000_000, cache_staged_state_dict=False,
                 overwrite=True):
        self.path, self.single_file_per_rank, self.sync_files = os.fspath(path), \
            single_file_per_rank, sync_files
        self.overwrite = overwrite

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.path = os.fspath(checkpoint_id)

    def prepare(self):
        """On the coordinator, before any rank writes: uncommit the old checkpoint."""
        os.makedirs(self.path, exist_ok=True)
        meta = os.path.join(self.path, _METADATA)
        if os.path.exists(meta):
            if not self.overwrite:
                raise RuntimeError(f"Checkpoint already exists at {self.path} and "
                                   "overwrite=False")
            os.remove(meta)

    def write(self, rank, items):
        """Write ``items`` (``(MetadataIndex, bytes-like)``); returns their ``_StorageInfo``."""
        os.makedirs(self.path, exist_ok=True)
        infos, files = {}, {}
        for i, (idx, blob) in enumerate(items):
            name = f"__{rank}_0.distcp" if self.single_file_per_rank else f"__{rank}_{i}.distcp"
            parts = files.setdefault(name, [])
            off = sum(len(p) for p in parts)
            parts.append(memoryview(blob).cast("B"))
            infos[idx] = _StorageInfo(name, off, len(parts[-1]))
        for name, parts in files.items():
            _atomic_write(os.path.join(self.path, name), parts, self.sync_files)
        return infos

    def finish(self, metadata):
        """On the coordinator, once every rank's files are in place: commit."""
        _atomic_write(os.path.join(self.path, _METADATA), [pickle.dumps(metadata)],
                      self.sync_files)


class FileSystemReader:
    """Reads a checkpoint from the directory ``path``: only the byte ranges of the chunks a
    rank needs (through ``numpy.memmap``).

    Example:
        >>> import ember, tempfile
        >>> import ember.distributed.checkpoint as dcp
        >>> d = tempfile.mkdtemp(); dcp.save({"w": ember.arange(3.)}, checkpoint_id=d)
        ... # doctest: +ELLIPSIS
        Metadata(...)
        >>> list(dcp.FileSystemReader(d).read_metadata().state_dict_metadata)
        ['w']
    """

    def __init__(self, path):
        self.path = os.fspath(path)

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.path = os.fspath(checkpoint_id)

    def read_metadata(self):
        p = os.path.join(self.path, _METADATA)
        if not os.path.exists(p):
            raise FileNotFoundError(f"No checkpoint at {self.path}: {_METADATA} is missing "
                                    "(never saved, or a save did not finish)")
        with open(p, "rb") as f:
            return pickle.load(f)

    def read_array(self, info, dtype, sizes):
        """The saved chunk at ``info`` as a read-only array of ``sizes`` (mapped, not read)."""
        n = int(np.prod(sizes, dtype=np.int64))
        if n == 0:
            return np.empty(sizes, dtype)
        m = np.memmap(os.path.join(self.path, info.relative_path), np.uint8, "r", info.offset,
                      (info.length,))
        return m.view(dtype).reshape(sizes)

    def read_bytes(self, info):
        with open(os.path.join(self.path, info.relative_path), "rb") as f:
            f.seek(info.offset)
            return io.BytesIO(f.read(info.length))


__all__ = ["FileSystemWriter", "FileSystemReader", "MetadataIndex"]
