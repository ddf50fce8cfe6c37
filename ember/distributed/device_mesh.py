"""``DeviceMesh`` and ``init_device_mesh``, as ``torch.distributed.device_mesh``: the ranks a
sharded tensor is spread over. ember's meshes are one-dimensional (one process group)."""
from . import distributed_c10d as c10d


class DeviceMesh:
    """The ranks (in ``mesh`` order) that a DTensor or an FSDP unit is spread over.

    Args:
        device_type (str): 'cpu' or 'cuda'.
        mesh (list or Tensor): the global ranks of the mesh, one dimension.
        mesh_dim_names (tuple of str, optional): a name for the dimension.

    Example:
        >>> import ember.distributed as dist
        >>> from ember.distributed.device_mesh import DeviceMesh
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> mesh = DeviceMesh("cpu", [0]); mesh.size(), mesh.get_local_rank()
        (1, 0)
        >>> dist.destroy_process_group()
    """

    def __init__(self, device_type, mesh, *, mesh_dim_names=None, _init_backend=True):
        from .. import tensor
        self.device_type = device_type
        self.mesh = mesh if hasattr(mesh, "tolist") else tensor(mesh)
        ranks = [int(r) for r in self.mesh.reshape(-1).tolist()]
        if self.mesh.dim() != 1:
            raise NotImplementedError(f"DeviceMesh: ember's meshes have one dimension, got "
                                      f"mesh of shape {tuple(self.mesh.shape)} (HSDP and 2-D "
                                      "parallelism are not implemented)")
        self.mesh_dim_names = tuple(mesh_dim_names) if mesh_dim_names else None
        world = c10d._default_pg("DeviceMesh")
        self._group = world if ranks == list(range(world.size())) else c10d.new_group(ranks)

    @property
    def ndim(self):
        return 1

    @property
    def shape(self):
        return tuple(self.mesh.shape)

    def size(self, mesh_dim=None):
        return self.mesh.numel()

    def get_group(self, mesh_dim=None):
        return self._group

    def get_rank(self):
        return c10d.get_rank()

    def get_local_rank(self, mesh_dim=None):
        return c10d.get_rank(self._group)

    def get_coordinate(self):
        r = c10d.get_rank(self._group)
        return None if r < 0 else [r]

    def __getitem__(self, name):
        if self.mesh_dim_names is None or name not in self.mesh_dim_names:
            raise KeyError(f"Invalid mesh_dim_name {name!r} specified. Valid mesh_dim_names "
                           f"are {self.mesh_dim_names}")
        return self

    def __eq__(self, other):
        return isinstance(other, DeviceMesh) and self.mesh.tolist() == other.mesh.tolist() \
            and self.device_type == other.device_type

    def __hash__(self):
        return hash((self.device_type, tuple(self.mesh.tolist())))

    def __repr__(self):
        names = f", mesh_dim_names={self.mesh_dim_names}" if self.mesh_dim_names else ""
        return f"DeviceMesh('{self.device_type}', {self.mesh.tolist()}{names})"


def init_device_mesh(device_type, mesh_shape, *, mesh_dim_names=None, backend_override=None):
    """A mesh over the first ``prod(mesh_shape)`` ranks of the default group.

    Example:
        >>> import ember.distributed as dist
        >>> from ember.distributed.device_mesh import init_device_mesh
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> init_device_mesh("cpu", (1,), mesh_dim_names=("dp",))
        DeviceMesh('cpu', [0], mesh_dim_names=('dp',))
        >>> dist.destroy_process_group()
    """
    shape = tuple(mesh_shape)
    if len(shape) != 1:
        raise NotImplementedError(f"init_device_mesh: ember's meshes have one dimension, got "
                                  f"mesh_shape {shape}")
    if mesh_dim_names is not None and len(mesh_dim_names) != len(shape):
        raise RuntimeError("mesh_shape and mesh_dim_names should have same length! Found "
                           f"len(mesh_dim_names): {len(mesh_dim_names)} and len(mesh_shape):"
                           f"{len(shape)}.")
    world = c10d.get_world_size()
    if shape[0] > world:
        raise RuntimeError(f"Mesh should not be bigger than default world size {world}, but "
                           f"found {shape[0]} ranks!")
    return DeviceMesh(device_type, list(range(shape[0])), mesh_dim_names=mesh_dim_names)
