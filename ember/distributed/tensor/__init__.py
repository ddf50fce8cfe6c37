"""``ember.distributed.tensor``: a small ``DTensor``, as ``torch.distributed.tensor``, enough
for sharded training: a tensor spread over a ``DeviceMesh`` with one placement per mesh
dimension, ``Replicate()`` or ``Shard(0)`` (along at most one dimension: its rank r holds rows
``[r*c, (r+1)*c)`` of the global tensor, ``c = ceil(rows / size)``, as ``torch.chunk``). A
2-D ``(Replicate(), Shard(0))`` is what HSDP gives its parameters.

NOTE: a DTensor's storage is its local piece. ``shape``, ``size()``, ``numel()`` and ``dim()``
describe the global tensor, as torch's; other operations (arithmetic, optimizers) act on the
local piece and return plain local tensors. torch propagates shardings through every op; ember
does not, which is what FSDP's optimizers need (element-wise updates of each shard) and no more.
"""
import numpy as np

from ..._size import Size
from ..._tensor import Tensor
from .. import distributed_c10d as c10d
from ..device_mesh import DeviceMesh, init_device_mesh  # noqa: F401


class Placement:
    """How a DTensor is laid out along the mesh dimension."""

    def is_shard(self, dim=None):
        return False

    def is_replicate(self):
        return False

    def is_partial(self):
        return False


class Shard(Placement):
    """Split along tensor dimension ``dim`` (ember: ``dim=0``), as ``torch.chunk``.

    Example:
        >>> from ember.distributed.tensor import Shard
        >>> Shard(0), Shard(0).is_shard()
        (Shard(dim=0), True)
    """

    def __init__(self, dim):
        self.dim = dim

    def is_shard(self, dim=None):
        return dim is None or dim == self.dim

    def __eq__(self, other):
        return isinstance(other, Shard) and other.dim == self.dim

    def __hash__(self):
        return hash(("Shard", self.dim))

    def __repr__(self):
        return f"Shard(dim={self.dim})"


class Replicate(Placement):
    """Every rank holds the whole tensor.

    Example:
        >>> from ember.distributed.tensor import Replicate
        >>> Replicate().is_replicate()
        True
    """

    def is_replicate(self):
        return True

    def __eq__(self, other):
        return isinstance(other, Replicate)

    def __hash__(self):
        return hash("Replicate")

    def __repr__(self):
        return "Replicate()"


def _rows(n, world, rank):
    """Rank ``rank``'s rows of ``n`` split as torch.chunk, and the chunk size."""
    c = -(-n // world) if n else 0
    return min(rank * c, n), min((rank + 1) * c, n), c


def _gather_rows(arr, n, group):
    """The global array whose rows each rank of ``group`` holds a torch.chunk of."""
    world = c10d.get_world_size(group)
    _, _, c = _rows(n, world, 0)
    send = np.zeros((c,) + arr.shape[1:], arr.dtype)
    send[:arr.shape[0]] = arr
    out = Tensor._wrap(np.empty((world * c,) + arr.shape[1:], arr.dtype))
    c10d.all_gather_into_tensor(out, Tensor._wrap(send), group=group)
    return out._data[:n]


def _check_placements(placements, mesh):
    placements = tuple(placements)
    if len(placements) != mesh.ndim or placements.count(Shard(0)) > 1 or not all(
            p.is_replicate() or p == Shard(0) for p in placements):
        raise NotImplementedError(f"ember's DTensor supports one placement per mesh dimension "
                                  f"(a {mesh.ndim}-D mesh), each Replicate() or Shard(0), "
                                  f"Shard(0) at most once, got placements {placements}")
    return placements


def _shard_dim(placements):
    """The mesh dimension the tensor's rows are split along (None: replicated)."""
    return next((d for d, p in enumerate(placements) if p.is_shard()), None)


class DTensor(Tensor):
    """A tensor spread over a ``DeviceMesh``; build one with ``distribute_tensor`` or
    ``DTensor.from_local``.

    Example:
        >>> import ember, ember.distributed as dist
        >>> from ember.distributed.tensor import distribute_tensor, init_device_mesh, Shard
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> d = distribute_tensor(ember.arange(6.).reshape(3, 2), init_device_mesh("cpu", (1,)),
        ...                       [Shard(0)])
        >>> d.shape, d.placements, d.full_tensor().sum()
        (torch.Size([3, 2]), (Shard(dim=0),), tensor(15.))
        >>> dist.destroy_process_group()
    """

    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    def __init__(self, *args, **kwargs):
        raise TypeError("DTensor is built with distribute_tensor or DTensor.from_local")

    @classmethod
    def _make(cls, local, mesh, placements, shape, requires_grad=False):
        t = object.__new__(cls)
        t._data, t.dtype = local._data, local.dtype
        if local.device.type != "cpu":
            t.device = local.device
        t._spec = (mesh, _check_placements(placements, mesh), Size(shape))
        t.requires_grad = requires_grad
        return t

    @staticmethod
    def from_local(local_tensor, device_mesh=None, placements=None, *, run_check=False,
                   shape=None, stride=None):
        """A DTensor whose piece on this rank is ``local_tensor`` (shared, not copied)."""
        mesh = device_mesh or init_device_mesh(local_tensor.device.type, (c10d.get_world_size(),))
        placements = _check_placements(placements or [Replicate()] * mesh.ndim, mesh)
        d = _shard_dim(placements)
        if shape is None:
            shape = tuple(local_tensor.shape)
            if d is not None:
                shape = (shape[0] * mesh.size(d),) + shape[1:]
        return DTensor._make(local_tensor.detach(), mesh, placements, shape)

    @property
    def device_mesh(self):
        return self._spec[0]

    @property
    def placements(self):
        return self._spec[1]

    @property
    def _local_tensor(self):
        return self.to_local()

    def to_local(self, *, grad_placements=None):
        """This rank's piece, sharing memory with the DTensor."""
        t = Tensor._wrap(self._data, self.device)
        t._storage = self._get_storage()
        return t

    def full_tensor(self, *, grad_placements=None):
        """The global tensor (an all-gather over the mesh for ``Shard(0)``)."""
        d = _shard_dim(self.placements)
        if d is None:
            return self.to_local().clone()
        group = self.device_mesh.get_group(d)
        return Tensor._wrap(_gather_rows(self._data, self._spec[2][0], group), self.device)

    def redistribute(self, device_mesh=None, placements=None, *, async_op=False):
        """The same global tensor with other ``placements`` on the same mesh."""
        placements = _check_placements(placements or self.placements, self.device_mesh)
        if placements == self.placements:
            return self
        full = self.full_tensor()
        return distribute_tensor(full, self.device_mesh, placements, src_data_rank=None)

    @property
    def shape(self):
        return self._spec[2]

    def size(self, dim=None):
        return self._spec[2] if dim is None else self._spec[2][dim]

    def numel(self):
        return int(np.prod(self._spec[2], dtype=np.int64))

    def dim(self):
        return len(self._spec[2])

    ndimension = dim

    @property
    def ndim(self):
        return len(self._spec[2])

    def norm(self, p="fro", dim=None, keepdim=False, dtype=None):
        """The norm of the global tensor, on every rank (one all-reduce of the shards'
        partial sums; MAX for inf), as a plain tensor: what ``clip_grad_norm_`` needs for
        sharded gradients.

        NOTE: torch returns a DTensor with a Partial placement, which becomes this value
        once redistributed."""
        local = self.to_local()
        if dim is not None:
            raise NotImplementedError("DTensor.norm over a dim is not implemented in ember")
        d = _shard_dim(self.placements)
        if d is None:
            return local.norm(p, dtype=dtype)
        order = 2.0 if p == "fro" else float(p)
        x = local.to(dtype) if dtype is not None else local
        part = x.abs().max() if order == float("inf") and x.numel() else \
            x.abs().pow(order).sum() if x.numel() else x.new_zeros(())
        part = part.clone()
        c10d.all_reduce(part, op=c10d.ReduceOp.MAX if order == float("inf") else
                        c10d.ReduceOp.SUM, group=self.device_mesh.get_group(d))
        return part if order == float("inf") else part.pow(1.0 / order)

    def detach(self):
        return DTensor._make(self.to_local(), *self._spec)

    def clone(self, *, memory_format=None):
        return DTensor._make(self.to_local().clone(), *self._spec)

    def copy_(self, src, non_blocking=False):
        if not isinstance(src, DTensor):
            raise RuntimeError("aten.copy_.default: got mixed torch.Tensor and DTensor, need to "
                               "convert all torch.Tensor to DTensor before calling distributed "
                               "operators!")
        if src.placements != self.placements or tuple(src.shape) != tuple(self.shape):
            src = src.redistribute(self.device_mesh, self.placements)
        self.to_local().copy_(src.to_local())
        return self

    def __repr__(self):
        return (f"DTensor(local_tensor={Tensor.__repr__(self.to_local())}, device_mesh="
                f"{self.device_mesh}, placements={self.placements})")

    def __reduce_ex__(self, protocol):
        return (_rebuild, (self.to_local().clone(), self.placements, tuple(self.shape),
                           self.device_mesh.mesh.tolist(), self.device_mesh.device_type))


def _rebuild(local, placements, shape, ranks, device_type):
    return DTensor._make(local, DeviceMesh(device_type, ranks), placements, shape)


def distribute_tensor(tensor, device_mesh=None, placements=None, *, src_data_rank=0):
    """Spread ``tensor`` over ``device_mesh``: with ``src_data_rank`` (default 0), the values of
    that group rank along every mesh dimension are used everywhere (a broadcast per dimension);
    with ``None``, each rank's own.

    Example:
        >>> import ember, ember.distributed as dist
        >>> from ember.distributed.tensor import distribute_tensor, Replicate
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> distribute_tensor(ember.ones(2), placements=[Replicate()]).to_local()
        tensor([1., 1.])
        >>> dist.destroy_process_group()
    """
    mesh = device_mesh or init_device_mesh(tensor.device.type, (c10d.get_world_size(),))
    placements = _check_placements(placements or [Replicate()] * mesh.ndim, mesh)
    full = tensor.detach()
    if src_data_rank is not None:
        full = full.clone()
        for dim in range(mesh.ndim):    # from group rank src_data_rank of each, as torch
            c10d.broadcast(full, group=mesh.get_group(dim), group_src=src_data_rank)
    local = full
    d = _shard_dim(placements)
    if d is not None:
        a, b, _ = _rows(full.shape[0], mesh.size(d), mesh.get_local_rank(d))
        local = Tensor._wrap(np.ascontiguousarray(full._data[a:b]), full.device)
    else:
        local = full.clone() if local is tensor or src_data_rank is None else local
    return DTensor._make(local, mesh, placements, tuple(tensor.shape), tensor.requires_grad)
