"""The collectives, as ``torch.distributed``'s (all-reduce, broadcast, gathers, scatters,
all-to-all, barriers, the coalesced forms).

Every collective stages its tensors as contiguous arrays on the engine's device (host NumPy
for MPI, CuPy for NCCL), starts one non-blocking engine call, and returns a ``Work``; waiting
on it polls the engine and then writes results back into the caller's tensors (so
non-contiguous and widened tensors come out right). ``async_op=False`` is start + wait.

Reductions of float16, bfloat16 and float8 run in float32 (MPI has no such types), rounded
once to the tensor's dtype at the end; bool reduces as uint8 (SUM is OR, PRODUCT is AND, as
torch).
"""
import datetime
import hashlib
import time
import warnings

import numpy as np

from .. import _dtype
from .._backends import backend
from ._state import (DebugLevel, RedOpType, ReduceOp, _group_rank, _is_tensor, _resolve, _world,
                     get_rank)
from ._work import Work, _finish, _then
from .store import DistStoreError


def _group(group, what, tensors):
    """The ProcessGroup of ``group`` (None for a rank outside it: the collective does
    nothing), once ``tensors`` are fit for collective ``what``."""
    from .._tensor import Tensor
    pg = _resolve(group)
    if pg is None:
        return None
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"{what}: expected a Tensor, got {type(t).__name__}")
    devices = {t.device.type for t in tensors}
    if len(devices) > 1:
        raise ValueError(f"{what}: tensors must all be on the same device, got "
                         f"{sorted(devices)}")
    if devices == {"meta"}:
        raise RuntimeError(f"{what}: meta tensors have no data to communicate")
    if _world.debug == DebugLevel.DETAIL and tensors and pg.engine.device_type == "cpu" and \
            what not in ("isend", "irecv"):
        _verify(pg, what, tensors[0])
    return pg


def _unflat(arr, tensors):
    """The elements of ``arr``, in order, into ``tensors``."""
    off, arr = 0, arr.reshape(-1)
    for t in tensors:
        _write(t, arr[off:off + t.numel()])
        off += t.numel()


def _write(t, arr):
    """Copy ``arr`` (engine array of ``t``'s size) into ``t``, unless it already is ``t``'s
    memory."""
    if arr is not t._data:
        arr = arr.reshape(t.shape).astype(t._data.dtype, copy=False)
        t._data[...] = backend(t.device).from_host(arr, t.device) if t.device.type != \
            "cpu" and isinstance(arr, np.ndarray) else arr
    t._bump_version()


def _inplace(pg, t):
    """An engine buffer for ``t``: its own memory when contiguous on the engine's device."""
    d = t._data
    if pg.engine.device_type == t.device.type and d.flags.c_contiguous and d.ndim > 0:
        return d
    return pg.engine.stage(d)


_LOW = (_dtype.float16, _dtype.bfloat16, _dtype.float8_e4m3fn, _dtype.float8_e5m2)


def _red_buf(pg, t, op, what):
    """``(buffer, op)`` to reduce ``t`` with on this engine (see the module docstring)."""
    op = RedOpType(op)
    if op == RedOpType.PREMUL_SUM:
        raise NotImplementedError(f"{what}: ReduceOp.PREMUL_SUM is not supported")
    dt = t.dtype
    if op in (RedOpType.BAND, RedOpType.BOR, RedOpType.BXOR) and \
            (dt.is_floating_point or dt.is_complex):
        raise RuntimeError(f"{what}: ReduceOp.{op.name} is not defined for {dt}")
    if op in (RedOpType.MIN, RedOpType.MAX) and dt.is_complex:
        raise RuntimeError(f"{what}: ReduceOp.{op.name} is not defined for complex {dt}")
    if dt in _LOW and pg.engine.device_type == "cpu":
        return pg.engine.stage(t._data).astype(np.float32), op
    if dt is _dtype.bool_:
        # 0/1 bytes: MAX is OR, MIN is AND (NCCL has no bitwise reductions)
        op = {RedOpType.SUM: RedOpType.MAX, RedOpType.AVG: RedOpType.MAX,
              RedOpType.PRODUCT: RedOpType.MIN}.get(op, op)
        return pg.engine.stage(t._data).view(np.uint8), op
    return _inplace(pg, t), op


def _averaged(buf, op, pg, dt):
    """``buf``, for AVG divided in place by the group size (integers truncate, as NCCL; the
    mean of booleans is their OR)."""
    if op == RedOpType.AVG and dt is not _dtype.bool_:
        if buf.dtype.kind in "iu":
            buf[...] = (buf / pg.size()).astype(buf.dtype)
        else:
            buf /= pg.size()
    return buf


def _verify(pg, what, t):
    """DETAIL: all-gather a fingerprint of this call (the op, and the dtype and shape of the
    tensor that is alike on every rank; all-to-all's sizes may differ) and compare."""
    fp = (what, str(t.dtype), None if what.startswith("all_to_all") else tuple(t.shape))
    got = np.zeros(pg.size() * 16, np.uint8)
    mine = np.frombuffer(hashlib.sha1(repr(fp).encode()).digest()[:16], np.uint8)
    pg.engine.wait(pg.engine.allgather(mine.copy(), got), pg.timeout.total_seconds(), what)
    bad = [pg.ranks[i] for i, h in enumerate(got.reshape(-1, 16)) if (h != mine).any()]
    if bad:
        raise RuntimeError(f"Detected mismatch between collectives on ranks. Rank "
                           f"{get_rank()} is running collective {what} with tensor "
                           f"{fp[1:]}, but ranks {bad} ran a different collective or other "
                           "shapes/dtypes (TORCH_DISTRIBUTED_DEBUG=DETAIL)")


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce ``tensor`` over the group; every rank gets the result in place.

    Example:
        >>> import ember, ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> t = ember.tensor([1., 2.]); dist.all_reduce(t, op=dist.ReduceOp.MAX); t
        tensor([1., 2.])
        >>> dist.destroy_process_group()
    """
    pg = _group(group, "all_reduce", [tensor])
    if pg is None:
        return None
    buf, mop = _red_buf(pg, tensor, op, "all_reduce")
    return _finish(pg, pg.engine.allreduce(buf, mop), lambda: _write(
        tensor, _averaged(buf, op, pg, tensor.dtype)), [tensor], "all_reduce", async_op)


def reduce(tensor, dst=None, op=ReduceOp.SUM, group=None, async_op=False, group_dst=None):
    """Reduce ``tensor`` over the group into rank ``dst``'s ``tensor``."""
    pg = _group(group, "reduce", [tensor])
    if pg is None:
        return None
    root = _group_rank(pg, 0 if dst is None else dst, group_dst, "reduce")
    buf, mop = _red_buf(pg, tensor, op, "reduce")
    finish = (lambda: _write(tensor, _averaged(buf, op, pg, tensor.dtype))) \
        if pg.rank() == root else None
    return _finish(pg, pg.engine.reduce(buf, mop, root), finish, [tensor], "reduce", async_op)


def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
    """Copy rank ``src``'s ``tensor`` into every rank's ``tensor``.

    Example:
        >>> import ember, ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> t = ember.arange(3); dist.broadcast(t, src=0); t
        tensor([0, 1, 2])
        >>> dist.destroy_process_group()
    """
    pg = _group(group, "broadcast", [tensor])
    if pg is None:
        return None
    root = _group_rank(pg, 0 if src is None else src, group_src, "broadcast")
    buf = _inplace(pg, tensor)
    reqs = pg.engine.broadcast(buf, root)
    return _finish(pg, reqs, lambda: _write(tensor, buf), [tensor], "broadcast", async_op)


def _same_size(what, ref, tensors):
    for t in tensors:
        if t.numel() != ref.numel() or t.dtype != ref.dtype:
            raise ValueError(f"{what}: every tensor must have {ref.numel()} elements of "
                             f"{ref.dtype} like the input, got {t.numel()} of {t.dtype}")


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """``tensor_list[i]`` = rank i's ``tensor``, on every rank.

    Example:
        >>> import ember, ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> out = [ember.zeros(2)]; dist.all_gather(out, ember.ones(2)); out
        [tensor([1., 1.])]
        >>> dist.destroy_process_group()
    """
    pg = _group(group, "all_gather", list(tensor_list) + [tensor])
    if pg is None:
        return None
    if len(tensor_list) != pg.size():
        raise ValueError(f"all_gather: tensor_list has {len(tensor_list)} tensors, expected "
                         f"one per rank ({pg.size()})")
    _same_size("all_gather", tensor, tensor_list)
    send = pg.engine.stage(tensor._data)
    recv = pg.engine.empty((pg.size(),) + send.shape, send.dtype)
    reqs = pg.engine.allgather(send, recv)
    return _finish(pg, reqs, lambda: _unflat(recv, tensor_list), tensor_list,
                   "all_gather", async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """Rank i's ``input_tensor`` into the i-th slice (along dim 0, or of the flat tensor)
    of ``output_tensor``."""
    pg = _group(group, "all_gather_into_tensor", [output_tensor, input_tensor])
    if pg is None:
        return None
    if output_tensor.numel() != input_tensor.numel() * pg.size() or \
            output_tensor.dtype != input_tensor.dtype:
        raise ValueError("all_gather_into_tensor: output tensor size must be equal to "
                         f"world_size ({pg.size()}) times input tensor size "
                         f"({input_tensor.numel()}), got {output_tensor.numel()}; dtypes "
                         f"{output_tensor.dtype} and {input_tensor.dtype}")
    send, recv = pg.engine.stage(input_tensor._data), _inplace(pg, output_tensor)
    reqs = pg.engine.allgather(send, recv)
    return _finish(pg, reqs, lambda: _write(output_tensor, recv), [output_tensor],
                   "all_gather_into_tensor", async_op)


_all_gather_base = all_gather_into_tensor


def _concat(pg, tensors):
    return np.concatenate([pg.engine.stage(t._data).reshape(-1) for t in tensors]) \
        if pg.engine.device_type == "cpu" else pg.engine.concat([t._data for t in tensors])


def _reduce_scatter(pg, output, send, op, what, async_op):
    buf, mop = _red_buf(pg, output, op, what)
    if buf.dtype != send.dtype:
        send = send.astype(buf.dtype)
    return _finish(pg, pg.engine.reduce_scatter(send, buf, mop), lambda: _write(
        output, _averaged(buf, op, pg, output.dtype)), [output], what, async_op)


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    """``output`` = the reduction over ranks of their ``input_list[my rank]``."""
    pg = _group(group, "reduce_scatter", [output] + list(input_list))
    if pg is None:
        return None
    if len(input_list) != pg.size():
        raise ValueError(f"reduce_scatter: input_list has {len(input_list)} tensors, "
                         f"expected {pg.size()}")
    _same_size("reduce_scatter", output, input_list)
    return _reduce_scatter(pg, output, _concat(pg, input_list), op, "reduce_scatter", async_op)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    """``output`` = the reduction over ranks of slice (my rank) of their ``input``."""
    pg = _group(group, "reduce_scatter_tensor", [output, input])
    if pg is None:
        return None
    if input.numel() != output.numel() * pg.size() or input.dtype != output.dtype:
        raise ValueError("reduce_scatter_tensor: input tensor must be the same size as "
                         f"output size ({output.numel()}) times world size ({pg.size()}), "
                         f"got {input.numel()}")
    return _reduce_scatter(pg, output, pg.engine.stage(input._data), op,
                           "reduce_scatter_tensor", async_op)


_reduce_scatter_base = reduce_scatter_tensor


def _rooted(pg, group, root, tensor, lst, what, role):
    """Whether this rank is the root of ``what`` (gather or scatter), once the tensors and
    ``lst`` (``{what}_list``: one per rank at the root, none elsewhere) are checked."""
    me, name = pg.rank() == root, f"{what}_list"
    if me and (not lst or len(lst) != pg.size()):
        raise ValueError(f"{what}: {name} on the {role} rank must hold {pg.size()} tensors")
    if not me and lst:
        raise ValueError(f"Argument ``{name}`` must NOT be specified on non-{role} ranks.")
    _group(group, what, [tensor] + list(lst or []))
    _same_size(what, tensor, lst or [])
    return me


def gather(tensor, gather_list=None, dst=None, group=None, async_op=False, group_dst=None):
    """Rank ``dst`` gets every rank's ``tensor`` in ``gather_list``."""
    pg = _resolve(group, "gather")
    if pg is None:
        return None
    root = _group_rank(pg, 0 if dst is None else dst, group_dst, "gather")
    me = _rooted(pg, group, root, tensor, gather_list, "gather", "destination")
    send = pg.engine.stage(tensor._data)
    recv = pg.engine.empty((pg.size(),) + send.shape, send.dtype) if me else None
    reqs = pg.engine.gather(send, recv, root)
    return _finish(pg, reqs, (lambda: _unflat(recv, gather_list)) if me else None,
                   gather_list or [], "gather", async_op)


def scatter(tensor, scatter_list=None, src=None, group=None, async_op=False, group_src=None):
    """Every rank's ``tensor`` = rank ``src``'s ``scatter_list[rank]``."""
    pg = _resolve(group, "scatter")
    if pg is None:
        return None
    root = _group_rank(pg, 0 if src is None else src, group_src, "scatter")
    me = _rooted(pg, group, root, tensor, scatter_list, "scatter", "source")
    send = _concat(pg, scatter_list) if me else None
    recv = _inplace(pg, tensor)
    reqs = pg.engine.scatter(send, recv, root)
    return _finish(pg, reqs, lambda: _write(tensor, recv), [tensor], "scatter", async_op)


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    """``output_tensor_list[i]`` = rank i's ``input_tensor_list[my rank]`` (sizes may
    differ per pair)."""
    pg = _group(group, "all_to_all", list(output_tensor_list) + list(input_tensor_list))
    if pg is None:
        return None
    if len(output_tensor_list) != pg.size() or len(input_tensor_list) != pg.size():
        raise ValueError(f"all_to_all: both lists must hold {pg.size()} tensors")
    send = _concat(pg, input_tensor_list)
    recv = pg.engine.empty((sum(t.numel() for t in output_tensor_list),), send.dtype)
    item = send.dtype.itemsize
    reqs = pg.engine.alltoallv(send, [t.numel() * item for t in input_tensor_list], recv,
                               [t.numel() * item for t in output_tensor_list])

    return _finish(pg, reqs, lambda: _unflat(recv, output_tensor_list), output_tensor_list,
                   "all_to_all", async_op)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None,
                      group=None, async_op=False):
    """Split ``input`` along dim 0 (``input_split_sizes`` rows to each rank, or equally),
    send the pieces, and concatenate what arrives into ``output``."""
    pg = _group(group, "all_to_all_single", [output, input])
    if pg is None:
        return None
    n = pg.size()

    def counts(t, splits, name):
        rows = t.shape[0] if t.dim() else 1
        row = t.numel() // max(rows, 1)
        if not splits:
            if rows % n:
                raise ValueError(f"all_to_all_single: {name} dim 0 ({rows}) is not divisible "
                                 f"by the world size ({n})")
            splits = [rows // n] * n
        if len(splits) != n or sum(splits) != rows:
            raise ValueError(f"all_to_all_single: {name}_split_sizes {list(splits)} must have "
                             f"{n} entries summing to dim 0 ({rows})")
        return [int(s) * row * t.element_size() for s in splits]
    sc, rc = counts(input, input_split_sizes, "input"), counts(output, output_split_sizes,
                                                                "output")
    send, recv = pg.engine.stage(input._data), _inplace(pg, output)
    reqs = pg.engine.alltoallv(send, sc, recv, rc)
    return _finish(pg, reqs, lambda: _write(output, recv), [output], "all_to_all_single", async_op)


def barrier(group=None, async_op=False, device_ids=None):
    """Wait until every rank of the group reaches this call.

    Example:
        >>> import ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> dist.barrier()
        >>> dist.destroy_process_group()
    """
    pg = _resolve(group, "barrier")
    if pg is None:
        return None
    return _finish(pg, pg.engine.barrier(), None, [], "barrier", async_op)


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """A barrier through the store in which rank 0 names the ranks that did not arrive
    within ``timeout``, as torch's."""
    pg = _resolve(group, "monitored_barrier")
    if pg is None:
        return None
    store, t = _world.store, timeout or pg.timeout
    secs = t.total_seconds() if isinstance(t, datetime.timedelta) else float(t)
    if store is None:
        return barrier(group)
    pg.barriers = getattr(pg, "barriers", 0) + 1
    key = f"monitored_barrier/{pg.group_name}/{pg.barriers}"
    if pg.rank() == 0:
        missing = []
        for r in pg.ranks[1:]:
            try:
                _store_wait(pg, store, f"{key}/{r}", 0 if missing and not wait_all_ranks else secs)
            except Exception:
                missing.append(r)
                if not wait_all_ranks:
                    break
        if missing:
            raise RuntimeError(
                f"Rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} failed "
                f"to pass monitoredBarrier in {int(secs * 1000)} ms")
        store.set(f"{key}/done", b"1")
    else:
        store.set(f"{key}/{get_rank()}", b"1")
        _store_wait(pg, store, f"{key}/done", secs)


def _store_wait(pg, store, key, secs):
    """``store.wait`` in short slices that keep the engine progressing: a peer may still be
    finishing an earlier collective that needs this rank's progress engine to complete."""
    deadline = time.monotonic() + secs
    while True:
        try:
            return store.wait([key], min(0.05, max(0.0, deadline - time.monotonic())))
        except DistStoreError:
            if time.monotonic() >= deadline:
                raise
            pg.engine.progress()


def supports_complex(reduceOp):
    """Whether ``reduceOp`` is defined on complex tensors (SUM, AVG, PREMUL_SUM).

    Example:
        >>> import ember.distributed as dist
        >>> dist.supports_complex(dist.ReduceOp.SUM), dist.supports_complex(dist.ReduceOp.MAX)
        (True, False)
    """
    return reduceOp not in (ReduceOp.MAX, ReduceOp.MIN, ReduceOp.PRODUCT, ReduceOp.BAND,
                            ReduceOp.BOR, ReduceOp.BXOR)


def _deprecated(name):
    warnings.warn(f"`torch.distributed.{name}` will be deprecated. If you must use it, please "
                  "revisit our documentation later at https://pytorch.org/docs/main/"
                  "distributed.html#collective-functions", FutureWarning, stacklevel=3)


def _flat(tensors, what):
    from .. import cat
    if len({t.dtype for t in tensors}) > 1:
        raise ValueError(f"{what}: Invalid usage of tensors with different dtypes. Found "
                         f"{sorted({str(t.dtype) for t in tensors})}.")
    return cat([t.detach().reshape(-1) for t in tensors])




def _all_reduce_coalesced(tensors, op=ReduceOp.SUM, group=None, async_op=False):
    """One all-reduce of ``tensors`` packed into one buffer, results written back."""
    if _resolve(group, "all_reduce_coalesced") is None:
        return None
    if any(t.dtype.is_complex for t in tensors) and not supports_complex(op):
        raise ValueError(f"all_reduce does not support {op} on complex tensors")
    flat = _flat(tensors, "all_reduce_coalesced")
    w = _then(all_reduce(flat, op, group, async_op=True), lambda: _unflat(flat._data, tensors))
    w._outputs = tensors
    return w if async_op else w.wait() and None


def all_reduce_coalesced(tensors, op=ReduceOp.SUM, group=None, async_op=False):
    """All-reduce every tensor of ``tensors`` (one dtype) in one collective (deprecated in
    torch, with its FutureWarning); ``async_op`` returns a Future, as torch's.

    Example:
        >>> import ember, ember.distributed as dist, warnings
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> ts = [ember.ones(2), ember.ones(1, 2)]
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore"); dist.all_reduce_coalesced(ts)
        >>> ts[1]
        tensor([[1., 1.]])
        >>> dist.destroy_process_group()
    """
    _deprecated("all_reduce_coalesced")
    tensors = [tensors] if _is_tensor(tensors) else list(tensors)
    w = _all_reduce_coalesced(tensors, op, group, async_op)
    return w.get_future() if async_op and w is not None else None


def _all_gather_coalesced(output_tensor_lists, input_tensor_list, group=None, async_op=False):
    pg = _resolve(group, "all_gather_coalesced")
    if pg is None:
        return None
    if not isinstance(output_tensor_lists, list):
        raise TypeError("Invalid function argument: output_tensor_lists should be a list")
    if len(output_tensor_lists) != pg.size():
        raise ValueError(f"all_gather_coalesced: output_tensor_lists has "
                         f"{len(output_tensor_lists)} lists, expected one per rank "
                         f"({pg.size()})")
    flat = _flat(input_tensor_list, "all_gather_coalesced")
    out = _flat([t for lst in output_tensor_lists for t in lst], "all_gather_coalesced")
    w = _then(all_gather_into_tensor(out, flat, group, async_op=True),
              lambda: _unflat(out._data, [t for lst in output_tensor_lists for t in lst]))
    w._outputs = output_tensor_lists
    return w if async_op else w.wait() and None


def all_gather_coalesced(output_tensor_lists, input_tensor_list, group=None, async_op=False):
    """``output_tensor_lists[i][j]`` = rank i's ``input_tensor_list[j]``, in one collective
    (deprecated in torch, with its FutureWarning); ``async_op`` returns a Future.

    Example:
        >>> import ember, ember.distributed as dist, warnings
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> out = [[ember.zeros(2), ember.zeros(1)]]
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     dist.all_gather_coalesced(out, [ember.ones(2), ember.tensor([3.])])
        >>> out
        [[tensor([1., 1.]), tensor([3.])]]
        >>> dist.destroy_process_group()
    """
    _deprecated("all_gather_coalesced")
    w = _all_gather_coalesced(output_tensor_lists, input_tensor_list, group, async_op)
    return w.get_future() if async_op and w is not None else None


def _coalesced_pairs(outputs, inputs, fn, group=None, async_op=True, **kw):
    """``fn(outputs[i], inputs[i])`` for each i, as one Work."""
    works = [fn(o, i, group=group, async_op=True, **kw) for o, i in zip(outputs, inputs)]
    w = Work(works[0].pg, [r for x in works for r in x._reqs], None, list(outputs), fn.__name__)
    w._finish = lambda: [x._complete() for x in works]
    return w if async_op else w.wait() and None


def all_gather_single(output_tensor, input_tensor, group=None, async_op=False):
    """``all_gather_into_tensor`` under torch's functional-collective name.

    Example:
        >>> import ember, ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> out = ember.zeros(2); dist.all_gather_single(out, ember.ones(2)); out
        tensor([1., 1.])
        >>> dist.destroy_process_group()
    """
    return all_gather_into_tensor(output_tensor, input_tensor, group, async_op)


def reduce_scatter_single(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    """``reduce_scatter_tensor`` under torch's functional-collective name.

    Example:
        >>> import ember, ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> out = ember.zeros(2); dist.reduce_scatter_single(out, ember.ones(2)); out
        tensor([1., 1.])
        >>> dist.destroy_process_group()
    """
    return reduce_scatter_tensor(output, input, op, group, async_op)
