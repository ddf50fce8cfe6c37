"""Collectives of picklable Python objects (pickled into byte tensors, sizes first)."""
import pickle

import numpy as np

from ._collectives import all_gather, broadcast
from ._p2p import recv, send
from ._state import _group_rank, _resolve


def _t(arr):
    from .._tensor import Tensor
    return Tensor._wrap(arr)


def _pickled(objs):
    """``objs`` pickled: a tensor of their byte counts (int64) and one of the bytes."""
    blobs = [pickle.dumps(o) for o in objs]
    return _t(np.array([len(b) for b in blobs], np.int64)), \
        _t(np.frombuffer(b"".join(blobs), np.uint8).copy())


def _unpickled(sizes, data):
    """The objects of ``data``, pickles of ``sizes[i]`` bytes each (in a padded row of
    ``data`` each when ``data`` is a list)."""
    sizes = sizes._data.tolist()
    if isinstance(data, list):
        return [pickle.loads(d._data[:n].tobytes()) for d, n in zip(data, sizes)]
    ends = np.cumsum(sizes, dtype=int).tolist()
    return [pickle.loads(data._data[e - n:e].tobytes()) for n, e in zip(sizes, ends)]


def all_gather_object(object_list, obj, group=None):
    """``object_list[i]`` = rank i's picklable ``obj``, on every rank.

    Example:
        >>> import ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> out = [None]; dist.all_gather_object(out, {"a": 1}); out
        [{'a': 1}]
        >>> dist.destroy_process_group()
    """
    pg = _resolve(group, "all_gather_object")
    if pg is None:
        return
    size, data = _pickled([obj])
    sizes = _t(np.zeros(pg.size(), np.int64))
    all_gather(list(sizes.unbind(0)), size, group)
    m = int(sizes._data.max())
    out = [_t(np.zeros(m, np.uint8)) for _ in range(pg.size())]
    all_gather(out, _t(np.pad(data._data, (0, m - data.numel()))), group)
    object_list[:] = _unpickled(sizes, out)


def gather_object(obj, object_gather_list=None, dst=None, group=None, group_dst=None):
    """Rank ``dst`` gets every rank's ``obj`` in ``object_gather_list``."""
    pg = _resolve(group, "gather_object")
    if pg is None:
        return
    root = _group_rank(pg, 0 if dst is None else dst, group_dst, "gather_object")
    tmp = [None] * pg.size()
    all_gather_object(tmp, obj, group)     # sizes differ per rank: gather them all
    if pg.rank() == root:
        object_gather_list[:] = tmp


def broadcast_object_list(object_list, src=None, group=None, device=None, group_src=None):
    """Every rank's ``object_list`` = rank ``src``'s (its entries pickled and broadcast)."""
    pg = _resolve(group, "broadcast_object_list")
    if pg is None:
        return
    root = _group_rank(pg, 0 if src is None else src, group_src, "broadcast_object_list")
    mine = pg.rank() == root
    sizes, data = _pickled(object_list) if mine else (_t(np.zeros(len(object_list),
                                                                   np.int64)), None)
    broadcast(sizes, group=group, group_src=root)
    data = data if mine else _t(np.empty(int(sizes._data.sum()), np.uint8))
    broadcast(data, group=group, group_src=root)
    if not mine:
        object_list[:] = _unpickled(sizes, data)


def scatter_object_list(scatter_object_output_list, scatter_object_input_list=None, src=None,
                        group=None, group_src=None):
    """``scatter_object_output_list[0]`` = rank ``src``'s ``scatter_object_input_list[rank]``."""
    pg = _resolve(group, "scatter_object_list")
    if pg is None:
        return
    root = _group_rank(pg, 0 if src is None else src, group_src, "scatter_object_list")
    objs = [list(scatter_object_input_list) if pg.rank() == root else None]
    broadcast_object_list(objs, group=group, group_src=root)
    scatter_object_output_list[0] = objs[0][pg.rank()]


def send_object_list(object_list, dst=None, group=None, device=None, group_dst=None,
                     use_batch=False):
    """Send the picklable objects of ``object_list`` to rank ``dst`` (their sizes, then their
    bytes), as torch's; the receiver calls ``recv_object_list`` with a list of as many.

    Example:
        >>> import ember.distributed as dist
        >>> callable(dist.send_object_list)
        True
    """
    pg = _resolve(group, "send_object_list")
    if pg is None:
        return
    peer = pg.ranks[_group_rank(pg, dst, group_dst, "send_object_list")]
    if peer == pg.ranks[pg.rank()]:
        raise ValueError("Invalid destination rank: destination rank should not be the same "
                         "as the rank of the current process.")
    sizes, data = _pickled(object_list)
    send(sizes, peer, group)
    send(data, peer, group)


def recv_object_list(object_list, src=None, group=None, device=None, group_src=None,
                     use_batch=False):
    """Fill ``object_list`` with the objects rank ``src`` (any rank when None) sent with
    ``send_object_list``; returns the sender's rank.

    Example:
        >>> import ember.distributed as dist
        >>> callable(dist.recv_object_list)
        True
    """
    pg = _resolve(group, "recv_object_list")
    if pg is None:
        return -1
    if src is not None or group_src is not None:
        src = pg.ranks[_group_rank(pg, src, group_src, "recv_object_list")]
        if src == pg.ranks[pg.rank()]:
            raise ValueError("Invalid source rank: source rank should not be the same as the "
                             "rank of the current process.")
    sizes = _t(np.empty(len(object_list), np.int64))
    sender = recv(sizes, src, group)
    data = _t(np.empty(int(sizes._data.sum()), np.uint8))
    recv(data, sender, group)
    object_list[:] = _unpickled(sizes, data)
    return sender
