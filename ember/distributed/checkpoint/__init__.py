"""``ember.distributed.checkpoint``: each rank saves its part of a state dict, and load
re-shards to any world size, as ``torch.distributed.checkpoint`` (DCP).

``save`` flattens the (nested) state dict to dotted keys, the ranks agree on who writes what
(rank 0 of the group gathers every rank's plan and gives each replicated item to one rank),
each rank writes its file, and rank 0 commits ``.metadata`` last (see ``filesystem.py``).
``load`` reads ``.metadata`` and, for every tensor of the target state dict, copies in place
the parts of the saved chunks that overlap it, whatever the world size that saved them.

Shard-aware tensors (the hook DTensor uses): a value with ``to_local()`` is saved and loaded
as its local shard. Its place in the global tensor (of shape ``value.shape``) comes from
``value.__create_chunk_list__()`` (torch's protocol: ``ChunkStorageMetadata``s) when it has
one, else from ``value.placements`` and ``value.device_mesh`` (``Shard(dim)`` splits as
``torch.chunk``; ``Replicate()`` holds the whole dim).

Example:
    >>> import ember, tempfile
    >>> import ember.distributed.checkpoint as dcp
    >>> d = tempfile.mkdtemp()
    >>> _ = dcp.save({"w": ember.arange(4.), "step": 7}, checkpoint_id=d)
    >>> sd = {"w": ember.zeros(4), "step": 0}; dcp.load(sd, checkpoint_id=d); sd
    {'w': tensor([0., 1., 2., 3.]), 'step': 7}
"""
import io
import warnings

import numpy as np

from .filesystem import FileSystemReader, FileSystemWriter
from .metadata import (BytesStorageMetadata, ChunkStorageMetadata, Metadata, MetadataIndex,
                       TensorProperties, TensorStorageMetadata)

__all__ = ["save", "load", "async_save", "save_state_dict", "load_state_dict",
           "FileSystemWriter", "FileSystemReader", "Metadata", "CheckpointException",
           "Stateful", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
           "TensorProperties", "MetadataIndex"]


class CheckpointException(Exception):
    """A save or load failed on some ranks: ``failures`` maps each rank to its error."""

    def __init__(self, msg, failures):
        super().__init__(msg)
        self.failures = failures


class Stateful:
    """What a top-level value with ``state_dict()`` and ``load_state_dict()`` is taken for:
    save stores its ``state_dict()``; load fills that and then calls ``load_state_dict``."""

    @classmethod
    def __subclasshook__(cls, C):
        return all(callable(getattr(C, m, None)) for m in ("state_dict", "load_state_dict"))


def _is_tensor(v):
    from ..._tensor import Tensor
    return isinstance(v, Tensor) or callable(getattr(v, "to_local", None))


def flatten(sd):
    """``[(dotted key, path, value)]``: dicts and lists holding tensors are walked, other
    values (lists of numbers, tuples of floats ...) are leaves, as torch's DCP flattening."""
    out = []

    def holds_tensor(v):
        return _is_tensor(v) or isinstance(v, dict) or (
            isinstance(v, (list, tuple)) and any(holds_tensor(e) for e in v))

    def walk(path, v):
        if isinstance(v, dict):
            for k, e in v.items():
                walk(path + (k,), e)
        elif isinstance(v, (list, tuple)) and holds_tensor(v):
            for i, e in enumerate(v):
                walk(path + (i,), e)
        else:
            out.append((".".join(map(str, path)), path, v))
    walk((), sd)
    return out


def _set(root, path, value):
    for k in path[:-1]:
        root = root[k]
    root[path[-1]] = value


def local_chunk(v):
    """``(global shape, offsets, local tensor)`` of a tensor or shard-aware tensor ``v``."""
    if not callable(getattr(v, "to_local", None)):
        return tuple(v.shape), (0,) * v.dim(), v
    local, shape = v.to_local(), tuple(v.shape)
    if callable(getattr(v, "__create_chunk_list__", None)):
        return shape, tuple(v.__create_chunk_list__()[0].offsets), local
    size, off = list(shape), [0] * len(shape)
    coord = v.device_mesh.get_coordinate()
    for mdim, p in enumerate(v.placements):
        if callable(getattr(p, "is_shard", None)) and p.is_shard():
            d, k = p.dim % len(shape), v.device_mesh.size(mdim)
            c = -(-size[d] // k)
            lo = min(coord[mdim] * c, size[d])
            off[d], size[d] = off[d] + lo, min(c, size[d] - lo)
        elif not (callable(getattr(p, "is_replicate", None)) and p.is_replicate()):
            raise ValueError(f"distributed.checkpoint: cannot save a tensor with placement "
                             f"{p} (only Shard and Replicate are stored)")
    return shape, tuple(off), local


def _pg_info(process_group, no_dist):
    from .. import distributed_c10d as c10d
    if no_dist or not c10d.is_initialized():
        if not no_dist:
            warnings.warn("torch.distributed is disabled, unavailable or uninitialized, "
                          "assuming the intent is to save/load in a single process.")
        return None, 0, 1
    return process_group, c10d.get_rank(process_group), c10d.get_world_size(process_group)


def _collect(pg, value):
    """Every rank's ``value`` on the group's first rank (None elsewhere)."""
    from .. import distributed_c10d as c10d
    out = [None] * c10d.get_world_size(pg) if c10d.get_rank(pg) == 0 else None
    c10d.gather_object(value, out, group=pg, group_dst=0)
    return out


def _from_first(pg, value):
    from .. import distributed_c10d as c10d
    box = [value]
    c10d.broadcast_object_list(box, group=pg, group_src=0)
    return box[0]


def _raise_if_failed(results, what):
    bad = {r: e for r, e in enumerate(results) if isinstance(e, BaseException)}
    if bad:
        raise CheckpointException(f"distributed.checkpoint.{what} failed on rank(s) "
                                  + ", ".join(f"{r}: {e!r}" for r, e in bad.items()), bad)


def _stateful_sds(state_dict):
    return {k: v.state_dict() if isinstance(v, Stateful) and not _is_tensor(v) else v
            for k, v in state_dict.items()}


def save(state_dict, *, checkpoint_id=None, storage_writer=None, planner=None,
         process_group=None, no_dist=False, use_collectives=True):
    """Save ``state_dict`` (every rank calls it with its own) into ``checkpoint_id``, a
    directory; returns the ``Metadata`` written (on every rank).

    A tensor the same on several ranks (same key, same chunk) is written once. Non-tensor
    values are serialized with ``ember.save``.

    Example:
        >>> import ember, tempfile
        >>> import ember.distributed.checkpoint as dcp
        >>> m = dcp.save({"w": ember.ones(2, 3)}, checkpoint_id=tempfile.mkdtemp())
        >>> m.state_dict_metadata["w"].size, m.state_dict_metadata["w"].chunks
        ((2, 3), [ChunkStorageMetadata(offsets=(0, 0), sizes=(2, 3))])
    """
    from ... import save as ember_save
    writer = storage_writer or FileSystemWriter(checkpoint_id)
    writer.reset(checkpoint_id)
    pg, rank, world = _pg_info(process_group, no_dist)
    items, plan, blobs = flatten(_stateful_sds(state_dict)), [], {}
    for key, path, v in items:
        if _is_tensor(v):
            shape, off, local = local_chunk(v)
            idx = MetadataIndex(key, off)
            plan.append((idx, TensorStorageMetadata(
                TensorProperties(local.dtype, requires_grad=bool(local.requires_grad)), shape,
                [ChunkStorageMetadata(off, tuple(local.shape))]), path,
                         local.numel() * local.element_size()))
            blobs[idx] = local
        else:
            idx = MetadataIndex(key)
            plan.append((idx, BytesStorageMetadata(), path, 0))
            blobs[idx] = v
    plans = [plan] if world == 1 else _collect(pg, plan)
    mine = None
    if rank == 0:               # the coordinator: who writes which item, and the metadata
        try:
            writer.prepare()
            owner, load, meta, where = {}, [0] * world, {}, {}
            for r, p in enumerate(plans):
                for idx, md, path, nbytes in p:
                    where.setdefault(idx.fqn, path)
                    if idx not in owner or load[r] < load[owner[idx]]:
                        if idx in owner:
                            load[owner[idx]] -= nbytes
                        owner[idx] = r
                        load[r] += nbytes
                    _merge(meta, idx, md)
            mine = [[i for i, o in owner.items() if o == r] for r in range(world)]
        except Exception as e:      # noqa: BLE001 -- every rank raises it, below
            mine = [e] * world
    if world > 1:
        from .. import distributed_c10d as c10d
        out = [None]
        c10d.scatter_object_list(out, mine, group=pg, group_src=0)
        mine = out[0]
    else:
        mine = mine[0]
    if isinstance(mine, BaseException):
        raise CheckpointException(f"distributed.checkpoint.save failed on the coordinator: "
                                  f"{mine!r}", {0: mine})
    try:
        data = []
        for idx in mine:
            v = blobs[idx]
            if idx.offset is None:
                buf = io.BytesIO()
                ember_save(v, buf)
                data.append((idx, buf.getbuffer()))
            else:
                a = v.detach()
                data.append((idx, np.ascontiguousarray(a.cpu().numpy()).view(np.uint8)
                             .reshape(-1)))
        written = writer.write(rank, data)
    except Exception as e:      # noqa: BLE001 -- gathered, then raised on every rank
        written = e
    results = [written] if world == 1 else _collect(pg, written)
    done = None
    if rank == 0:
        try:
            _raise_if_failed(results, "save")
            storage = {k: v for r in results for k, v in r.items()}
            done = Metadata(meta, where, storage)
            writer.finish(done)
        except Exception as e:  # noqa: BLE001
            done = e
    done = done if world == 1 else _from_first(pg, done)
    if isinstance(done, BaseException):
        raise done
    return done


def _merge(meta, idx, md):
    old = meta.get(idx.fqn)
    if old is None:
        meta[idx.fqn] = md
    elif isinstance(old, TensorStorageMetadata) != isinstance(md, TensorStorageMetadata) or (
            isinstance(md, TensorStorageMetadata) and (old.size != md.size or
                                                       old.properties.dtype !=
                                                       md.properties.dtype)):
        raise ValueError(f"distributed.checkpoint.save: ranks disagree on '{idx.fqn}': "
                         f"{old} vs {md}")
    elif isinstance(md, TensorStorageMetadata) and md.chunks[0] not in old.chunks:
        old.chunks.append(md.chunks[0])


def load(state_dict, *, checkpoint_id=None, storage_reader=None, planner=None,
         process_group=None, no_dist=False):
    """Load a checkpoint into ``state_dict`` in place: its tensors (allocated beforehand, on
    their devices) are filled from whatever chunks overlap them, so the saving world size
    does not matter; other values are replaced. Every key of ``state_dict`` must be in the
    checkpoint; extra keys in the checkpoint are ignored. Needs no communication: each rank
    reads the shared ``.metadata`` and the byte ranges it needs.

    Example:
        >>> import ember, tempfile
        >>> import ember.distributed.checkpoint as dcp
        >>> d = tempfile.mkdtemp(); _ = dcp.save({"w": ember.arange(6.)}, checkpoint_id=d)
        >>> sd = {"w": ember.zeros(6)}; dcp.load(sd, checkpoint_id=d); sd["w"]
        tensor([0., 1., 2., 3., 4., 5.])
    """
    from ... import from_numpy, load as ember_load, no_grad
    reader = storage_reader or FileSystemReader(checkpoint_id)
    reader.reset(checkpoint_id)
    _pg_info(process_group, no_dist)
    meta = reader.read_metadata()
    flat_sd = _stateful_sds(state_dict)
    for key, path, v in flatten(flat_sd):
        md = meta.state_dict_metadata.get(key)
        if md is None:
            raise RuntimeError(f"Missing key in checkpoint state_dict: {key}.")
        if not _is_tensor(v):
            if not isinstance(md, BytesStorageMetadata):
                raise RuntimeError(f"distributed.checkpoint.load: '{key}' is a tensor in the "
                                   f"checkpoint but {type(v).__name__} in the state_dict")
            _set(flat_sd, path, ember_load(reader.read_bytes(meta.storage_data[MetadataIndex(
                key)]), weights_only=False))
            continue
        if not isinstance(md, TensorStorageMetadata):
            raise RuntimeError(f"distributed.checkpoint.load: '{key}' is not a tensor in the "
                               "checkpoint")
        shape, off, local = local_chunk(v)
        if tuple(md.size) != shape:
            raise RuntimeError(f"Size mismatch between saved {tuple(md.size)} and current: "
                               f"{shape} for {key}")
        want = np.empty(tuple(local.shape), md.properties.dtype.np)
        filled = 0
        for c in md.chunks:
            lo = [max(a, b) for a, b in zip(c.offsets, off)]
            hi = [min(a + s, b + t) for a, s, b, t in zip(c.offsets, c.sizes, off, local.shape)]
            if any(h <= l for l, h in zip(lo, hi)) and len(shape):
                continue
            src = reader.read_array(meta.storage_data[MetadataIndex(key, tuple(c.offsets))],
                                    md.properties.dtype.np, tuple(c.sizes))
            dst_box = tuple(slice(l - o, h - o) for l, h, o in zip(lo, hi, off))
            want[dst_box] = src[tuple(slice(l - o, h - o) for l, h, o in
                                      zip(lo, hi, c.offsets))]
            filled += int(np.prod([h - l for l, h in zip(lo, hi)], dtype=np.int64))
        if filled < want.size:
            raise RuntimeError(f"distributed.checkpoint.load: the checkpoint's chunks of "
                               f"'{key}' do not cover the part this rank needs (offsets "
                               f"{off}, sizes {tuple(local.shape)})")
        with no_grad():
            local.copy_(from_numpy(want))
    for k, v in state_dict.items():
        if isinstance(v, Stateful) and not _is_tensor(v):
            v.load_state_dict(flat_sd[k])
        elif flat_sd[k] is not v:
            state_dict[k] = flat_sd[k]


def async_save(state_dict, *, checkpoint_id=None, storage_writer=None, planner=None,
               process_group=None):
    """``save`` run at once; returns a completed ``Future`` holding its ``Metadata`` (ember
    stages and writes synchronously: MPI collectives must stay on the calling thread)."""
    from ...futures import Future
    fut = Future()
    fut.set_result(save(state_dict, checkpoint_id=checkpoint_id,
                        storage_writer=storage_writer, process_group=process_group))
    return fut


def _deprecated(new, storage_arg):
    def old(state_dict, storage, process_group=None, coordinator_rank=0, no_dist=False,
            planner=None):
        warnings.warn(f"'{old.__name__}' is deprecated and will be removed in future "
                      f"versions. Please use '{new.__name__}' instead.", FutureWarning)
        return new(state_dict, process_group=process_group, no_dist=no_dist,
                   **{storage_arg: storage})
    old.__name__ = old.__qualname__ = new.__name__ + "_state_dict"
    old.__doc__ = f"Deprecated spelling of ``{new.__name__}`` (torch keeps it too)."
    return old


save_state_dict, load_state_dict = _deprecated(save, "storage_writer"), \
    _deprecated(load, "storage_reader")
