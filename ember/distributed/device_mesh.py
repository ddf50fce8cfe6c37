"""``DeviceMesh`` and ``init_device_mesh``, as ``torch.distributed.device_mesh``: ranks laid
out in an n-dimensional array, one process group per dimension (the ranks that differ only
along it), sliced by dimension name (``mesh["dp"]``).

Each dimension's groups come from one ``MPI_Comm_split`` over the default group (every rank
calls ``DeviceMesh(...)``, as in torch); a rank's group along a dimension holds its line of
the mesh, in mesh order, so its group rank is its coordinate. Slices share their parent's
groups. ember's DTensor takes a mesh of any dimension (Shard(0) along at most one), FSDP a 1-D
mesh or, for HSDP, a 2-D one.
"""
import numpy as np

from . import distributed_c10d as c10d


def _strides(shape):
    return tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))


class DeviceMesh:
    """The ranks (in ``mesh`` order) that a DTensor or an FSDP unit is spread over.

    Args:
        device_type (str): 'cpu' or 'cuda'.
        mesh (list or Tensor): the global ranks, an n-dimensional array.
        mesh_dim_names (tuple of str, optional): a name per dimension, for slicing.

    Example:
        >>> import ember.distributed as dist
        >>> from ember.distributed.device_mesh import DeviceMesh
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> mesh = DeviceMesh("cpu", [[0]], mesh_dim_names=("dp", "tp"))
        >>> mesh.size(), mesh.get_local_rank("tp"), mesh["tp"]
        (1, 0, DeviceMesh((tp=1), 'cpu', stride=((),)))
        >>> dist.destroy_process_group()
    """

    def __init__(self, device_type, mesh, *, mesh_dim_names=None, backend_override=None,
                 _init_backend=True, _groups=None, _stride=None):
        from .. import int32, tensor
        self.device_type = device_type
        self.mesh = tensor(mesh.tolist() if hasattr(mesh, "tolist") else mesh, dtype=int32)
        if mesh_dim_names is not None and len(mesh_dim_names) != self.mesh.dim():
            raise ValueError(f"mesh_dim_names {tuple(mesh_dim_names)} must name each of the "
                             f"mesh's {self.mesh.dim()} dimensions")
        self.mesh_dim_names = tuple(mesh_dim_names) if mesh_dim_names else None
        self._stride = _stride or _strides(self.shape)
        world = c10d._default_pg("DeviceMesh")
        if self.mesh.numel() > world.size():
            raise RuntimeError(f"Mesh should not be bigger than default world size "
                               f"{world.size()}, but found {self.mesh.numel()} ranks!")
        arr = np.asarray(self.mesh.tolist(), dtype=np.int64).reshape(self.shape)
        here = np.argwhere(arr == c10d.get_rank())
        self._coord = tuple(int(i) for i in here[0]) if len(here) else None
        self._groups = list(_groups) if _groups is not None else \
            [self._dim_group(arr, d, world) for d in range(arr.ndim)]

    def _dim_group(self, arr, d, world):
        """This rank's line of the mesh along ``d``, as a group (one split on every rank)."""
        lines = np.moveaxis(arr, d, -1).reshape(-1, arr.shape[d])
        if len(lines) == 1 and lines[0].tolist() == list(range(world.size())):
            return world
        me = c10d.get_rank()
        color = next((i for i, line in enumerate(lines) if me in line), None)
        key = int(np.nonzero(lines[color] == me)[0][0]) if color is not None else 0
        engine = c10d._split_engine(world, color, key, "DeviceMesh")
        return c10d._register(engine, lines[color].tolist() if color is not None else [],
                              world._backend, world.timeout, f"mesh_dim_{d}")

    @property
    def ndim(self):
        return self.mesh.dim()

    @property
    def shape(self):
        return tuple(self.mesh.shape)

    def _dim(self, mesh_dim):
        if not isinstance(mesh_dim, str):
            return mesh_dim
        if not self.mesh_dim_names:
            raise KeyError("No `mesh_dim_names` found.")
        if mesh_dim not in self.mesh_dim_names:
            raise KeyError(f"Mesh dimension '{mesh_dim}' does not exist. Available mesh "
                           f"dimensions are: mesh_dim_names={self.mesh_dim_names}")
        return self.mesh_dim_names.index(mesh_dim)

    def size(self, mesh_dim=None):
        """The number of ranks in the mesh, or along ``mesh_dim``."""
        return self.mesh.numel() if mesh_dim is None else self.shape[self._dim(mesh_dim)]

    def get_group(self, mesh_dim=None):
        """The process group along ``mesh_dim`` (an index or a name; may be omitted on a
        one-dimensional mesh)."""
        if self.ndim > 1 and mesh_dim is None:
            raise RuntimeError(f"Found the DeviceMesh have {self.ndim} dimensions. Optional "
                               "kwarg `mesh_dim` needs to be specified when device_mesh.ndim "
                               "> 1. If you want to get the list of all the ProcessGroups in "
                               "the DeviceMesh,please use `get_all_groups()` instead.")
        return self._groups[0 if mesh_dim is None else self._dim(mesh_dim)]

    def get_all_groups(self):
        return list(self._groups)

    def get_rank(self):
        """This process's global rank."""
        return c10d.get_rank()

    def get_local_rank(self, mesh_dim=None):
        """This rank's coordinate along ``mesh_dim`` (its rank in that dimension's group)."""
        if self.ndim > 1 and mesh_dim is None:
            raise RuntimeError(f"Found the DeviceMesh have {self.ndim} dimensions. Optional "
                               "kwarg `mesh_dim` needs to be specified when device_mesh.ndim "
                               "> 1.")
        return c10d.get_rank(self.get_group(mesh_dim))

    def get_coordinate(self):
        """This rank's index in the mesh along every dimension; None when it is not in it."""
        return self._coord

    def __getitem__(self, mesh_dim_names):
        """The submesh of the named dimensions (in the mesh's order) that holds this rank."""
        if not self.mesh_dim_names:
            raise RuntimeError("Cannot slice a DeviceMesh without mesh_dim_names!")
        names = (mesh_dim_names,) if isinstance(mesh_dim_names, str) else tuple(mesh_dim_names)
        if names == self.mesh_dim_names:
            return self
        if not all(n in self.mesh_dim_names for n in names):
            raise KeyError(f"Invalid mesh_dim_names {names} specified. Valid mesh_dim_names "
                           f"are {list(self.mesh_dim_names)}.")
        dims = [self.mesh_dim_names.index(n) for n in names]
        strides = [self._stride[d] for d in dims if self.shape[d] > 1]
        if strides != sorted(strides, reverse=True):      # size-1 dimensions may go anywhere
            raise KeyError(f"Invalid mesh_dim_names {names} specified. Mesh dim indices "
                           "should be in ascending order.")
        coord = self._coord or (0,) * self.ndim
        index = tuple(slice(None) if d in dims else coord[d] for d in range(self.ndim))
        sub = np.asarray(self.mesh.tolist()).reshape(self.shape)[index]
        return DeviceMesh(self.device_type, sub.tolist(), mesh_dim_names=names,
                          _groups=[self._groups[d] for d in dims],
                          _stride=tuple(self._stride[d] for d in dims))

    @staticmethod
    def from_group(group, device_type, mesh=None, *, mesh_dim_names=None):
        """A mesh over existing groups: one group (a 1-D mesh of its ranks), or one group per
        dimension of ``mesh``."""
        groups = [group] if not isinstance(group, (list, tuple)) else list(group)
        if not groups:
            raise ValueError("Expects at least one ProcessGroup to be passed")
        if mesh is None:
            if len(groups) > 1:
                raise ValueError("Must pass mesh if passing multiple ProcessGroups")
            mesh = c10d.get_process_group_ranks(groups[0])
        m = DeviceMesh(device_type, mesh, mesh_dim_names=mesh_dim_names, _groups=groups)
        if len(groups) != m.ndim:
            raise ValueError(f"Expects mesh with ndim equal to number of ProcessGroups but got "
                             f"mesh {m.mesh.tolist()} and {len(groups)} ProcessGroups")
        return m

    def __eq__(self, other):
        return isinstance(other, DeviceMesh) and self.mesh.tolist() == other.mesh.tolist() \
            and self.device_type == other.device_type and \
            self.mesh_dim_names == other.mesh_dim_names

    def __hash__(self):
        return hash((self.device_type, str(self.mesh.tolist()), self.mesh_dim_names))

    def __repr__(self):
        sizes = f"({', '.join(f'{k}={v}' for k, v in zip(self.mesh_dim_names, self.shape))})" \
            if self.mesh_dim_names else f"{self.shape}"
        # NOTE: torch's layouts (CuTe) drop the stride of a size-1 dimension: it shows as ()
        stride = tuple(() if n == 1 else s for n, s in zip(self.shape, self._stride))
        return f"DeviceMesh({sizes}, '{self.device_type}', stride={stride})"


def init_device_mesh(device_type, mesh_shape, *, mesh_dim_names=None, backend_override=None):
    """A mesh of shape ``mesh_shape`` over the first ``prod(mesh_shape)`` ranks of the
    default group, in row-major order; every rank calls it.

    Example:
        >>> import ember.distributed as dist
        >>> from ember.distributed.device_mesh import init_device_mesh
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> init_device_mesh("cpu", (1,), mesh_dim_names=("dp",))
        DeviceMesh((dp=1), 'cpu', stride=((),))
        >>> dist.destroy_process_group()
    """
    shape = tuple(mesh_shape)
    if mesh_dim_names is not None:
        if len(set(mesh_dim_names)) != len(mesh_dim_names):
            raise RuntimeError("Each mesh_dim_name must be unique. Found repeated mesh_dim_name "
                               f"in mesh_dim_names {tuple(mesh_dim_names)}")
        if len(shape) != len(mesh_dim_names):
            raise RuntimeError("mesh_shape and mesh_dim_names should have same length! Found "
                               f"len(mesh_dim_names): {len(mesh_dim_names)} and "
                               f"len(mesh_shape):{len(shape)}.")
    if device_type and not device_type.isalpha():
        raise RuntimeError(f"Device type with index is not supported but got {device_type}. "
                           "If you maintained a 'torch.device' object, it's recommended to pass "
                           "in 'device.type'.")
    return DeviceMesh(device_type, np.arange(int(np.prod(shape))).reshape(shape).tolist(),
                      mesh_dim_names=mesh_dim_names)
