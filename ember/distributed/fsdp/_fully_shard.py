"""FSDP2: ``fully_shard``, as ``torch.distributed.fsdp.fully_shard``. Each parameter becomes a
``DTensor`` sharded along dim 0 over the mesh (HSDP, a 2-D mesh: sharded over dim 1,
replicated over dim 0); the module's class becomes ``FSDP<Class>`` (also an ``FSDPModule``),
whose forward all-gathers its parameters before running and frees them after (see _unit.py
for the collectives and the backward)."""
from dataclasses import dataclass

from ..._tensor import Tensor
from ...nn.parameter import Parameter
from .. import distributed_c10d as c10d
from ..tensor import DTensor, Replicate, Shard, init_device_mesh
from ._unit import DEPTH, Unit, cast_floats, collect, enter_forward


@dataclass(frozen=True)
class MixedPrecisionPolicy:
    """Dtypes for FSDP2: parameters are all-gathered and used in ``param_dtype``, gradients
    reduce-scattered in ``reduce_dtype`` (default: ``param_dtype``), outputs cast to
    ``output_dtype``; floating inputs are cast to ``param_dtype`` when
    ``cast_forward_inputs``. The sharded parameters keep their dtype.

    Example:
        >>> import ember
        >>> from ember.distributed.fsdp import MixedPrecisionPolicy
        >>> MixedPrecisionPolicy(param_dtype=ember.bfloat16).reduce_dtype is None
        True
    """
    param_dtype: object = None
    reduce_dtype: object = None
    output_dtype: object = None
    cast_forward_inputs: bool = True


@dataclass
class OffloadPolicy:
    """No offloading (the default)."""


@dataclass
class CPUOffloadPolicy(OffloadPolicy):
    """Keep sharded parameters, gradients and optimizer state on the CPU. ember's CPU tensors
    are already there; on CUDA this policy is not implemented (raises at ``fully_shard``)."""
    pin_memory: bool = True


class _DParam(DTensor, Parameter):
    """A sharded parameter: a DTensor that is also an ``nn.Parameter``."""


class _State(Unit):
    """FSDP2's unit: one DTensor per parameter, swapped with the unsharded leaf while
    unsharded (as torch, the module then shows plain full tensors)."""

    def __init__(self, module, mesh, reshard_after_forward, mp_policy, ignored_params):
        params, slots = collect(module, lambda m: isinstance(m, FSDPModule), ignored_params or ())
        super().__init__(params, slots, mesh.get_group(mesh.ndim - 1), flat=False,
                         reshard_after_forward=reshard_after_forward,
                         param_dtype=mp_policy.param_dtype, reduce_dtype=mp_policy.reduce_dtype,
                         replica_group=mesh.get_group(0) if mesh.ndim == 2 else None)
        self.module, self.mesh, self.mp = module, mesh, mp_policy
        placements = [Replicate()] * (mesh.ndim - 1) + [Shard(0)]
        self.sharded = [_DParam._make(Tensor._wrap(loc, p.device), mesh, placements, p.shape,
                                      p.requires_grad)
                        for p, loc in zip(params, self.local_pieces(self._full_arrays))]
        del self._full_arrays
        self._show(self.sharded)

    def _show(self, which):
        for owner, name, i in self.slots:
            owner._parameters[name] = which[i]

    def local_arrays(self):
        return [p._data for p in self.sharded]

    def accumulate_grads(self, arrays):
        for p, a in zip(self.sharded, arrays):
            if p.grad is None:
                p.grad = DTensor._make(Tensor._wrap(a, p.device), self.mesh, p.placements,
                                       p.shape)
            else:
                p.grad._data += a

    def show(self, full):
        self._show(self.unsharded if full else self.sharded)


def _pre_forward(module, args, kwargs):
    st = module._fsdp_state
    st.is_root = enter_forward(module, lambda m: [x._fsdp_state for x in m.modules()
                                                  if isinstance(x, FSDPModule)])
    st.pre_forward()
    if st.mp.param_dtype is not None and st.mp.cast_forward_inputs:
        args, kwargs = cast_floats(args, st.mp.param_dtype), cast_floats(kwargs,
                                                                         st.mp.param_dtype)
    return args, kwargs


def _post_forward(module, args, out):
    st = module._fsdp_state
    DEPTH[0] -= 1
    if out is None:                         # forward raised
        return None
    if st.mp.output_dtype is not None:
        out = cast_floats(out, st.mp.output_dtype)
    st.post_forward(out, st.is_root)
    return out


class UnshardHandle:
    """What ``FSDPModule.unshard(async_op=True)`` returns: ``wait()`` waits for the
    all-gather and shows the unsharded parameters (the module's forward waits if it was not
    called)."""

    def __init__(self, state=None):
        self._state = state

    def wait(self):
        if self._state is not None:
            self._state.unshard()
            self._state = None


class FSDPModule:
    """The methods ``fully_shard`` adds to a module (its class becomes ``FSDP<Class>``).

    Example:
        >>> import ember, ember.distributed as dist
        >>> from ember.distributed.fsdp import fully_shard, FSDPModule
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> m = fully_shard(ember.nn.Linear(2, 3))
        >>> isinstance(m, FSDPModule), type(m).__name__, m.weight.placements
        (True, 'FSDPLinear', (Shard(dim=0),))
        >>> m.unshard(); type(m.weight).__name__, m.weight.shape
        ('Parameter', torch.Size([3, 2]))
        >>> m.reshard(); type(m.weight).__name__
        '_DParam'
        >>> dist.destroy_process_group()
    """

    def unshard(self, async_op=False):
        """All-gather this module's parameters (the module then shows them unsharded); with
        ``async_op``, start it and return an ``UnshardHandle``."""
        self._fsdp_state.unshard(async_op)
        return UnshardHandle(self._fsdp_state) if async_op else None

    def reshard(self):
        """Free the unsharded parameters; the module shows its DTensor shards again."""
        self._fsdp_state.reshard()

    def _fsdp_states(self, recurse):
        mods = self.modules() if recurse else [self]
        return [m._fsdp_state for m in mods if isinstance(m, FSDPModule)]

    def set_requires_gradient_sync(self, requires_gradient_sync, *, recurse=True):
        """With False, backward keeps accumulating unsharded gradients without communicating
        (gradient accumulation); the next backward with True reduce-scatters the sum."""
        for st in self._fsdp_states(recurse):
            st.sync = requires_gradient_sync

    def set_reshard_after_forward(self, reshard_after_forward, recurse=True):
        """Whether forward frees the unsharded parameters (backward all-gathers them again)."""
        for st in self._fsdp_states(recurse):
            st.reshard_after_forward = reshard_after_forward

    def set_modules_to_forward_prefetch(self, modules):
        """All-gather ``modules`` (FSDP modules) asynchronously as this one's forward starts,
        after starting its own."""
        self._fsdp_state.forward_prefetch = _states(modules)

    def set_modules_to_backward_prefetch(self, modules):
        """All-gather ``modules`` asynchronously as this one's backward starts (instead of the
        default: the next in backward, the reverse of the order forwards finished)."""
        self._fsdp_state.backward_prefetch = _states(modules)

    def set_is_last_backward(self, is_last_backward):
        """Accepted for torch compatibility: ember always reshards after backward."""


def _states(modules):
    for m in modules:
        if not isinstance(m, FSDPModule):
            raise ValueError(f"Expects FSDPModule but got {type(m)}: {m}")
    return [m._fsdp_state for m in modules]


_CLASSES = {}


def fully_shard(module, *, mesh=None, reshard_after_forward=None, shard_placement_fn=None,
                mp_policy=MixedPrecisionPolicy(), offload_policy=OffloadPolicy(),
                ignored_params=None):
    """Shard ``module``'s parameters (those not already under a ``fully_shard``-ed
    submodule) along dim 0 over ``mesh``; call it on each block, then on the root.

    Args:
        mesh (DeviceMesh): default: all ranks of the default group; a 2-D mesh is HSDP:
            parameters sharded over dim 1 and replicated over dim 0 (gradients
            reduce-scattered over dim 1, then all-reduced over dim 0).
        reshard_after_forward (bool, optional): free the unsharded parameters after forward
            (all-gather again for backward); default None: True except for the root.
        mp_policy (MixedPrecisionPolicy): the dtypes of compute and gradient reduction.
        offload_policy (OffloadPolicy): ``CPUOffloadPolicy`` is accepted for CPU modules.
        ignored_params (set of Parameter): left unsharded and unmanaged.

    Example:
        >>> import ember, ember.distributed as dist
        >>> from ember.distributed.fsdp import fully_shard
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> model = ember.nn.Sequential(ember.nn.Linear(2, 4), ember.nn.Linear(4, 1))
        >>> for layer in model:
        ...     _ = fully_shard(layer)
        >>> model = fully_shard(model)
        >>> opt = ember.optim.AdamW(model.parameters(), lr=0.1)
        >>> model(ember.ones(3, 2)).sum().backward(); opt.step()
        >>> type(model[0].weight.grad).__name__
        'DTensor'
        >>> dist.destroy_process_group()
    """
    from ...nn.modules.container import ModuleDict, ModuleList
    if isinstance(module, (ModuleList, ModuleDict)):
        raise ValueError(f"fully_shard does not support containers that do not implement "
                         f"forward: {module}")
    if isinstance(module, FSDPModule):
        raise ValueError(f"fully_shard was already applied to {type(module).__name__}")
    if shard_placement_fn is not None:
        raise NotImplementedError("fully_shard: shard_placement_fn (shards other than dim 0) "
                                  "is not implemented in ember")
    mesh = mesh or init_device_mesh("cpu", (c10d.get_world_size(),))
    if mesh.ndim not in (1, 2):
        raise ValueError(f"fully_shard expects a 1D or 2D DeviceMesh but got {mesh}")
    if mesh.ndim == 2 and mesh.mesh_dim_names is None:
        raise AssertionError("Please init the 2D mesh for HSDP with mesh_dim_names specified")
    if isinstance(offload_policy, CPUOffloadPolicy) and any(
            p.device.type != "cpu" for p in module.parameters()):
        raise NotImplementedError("fully_shard: CPUOffloadPolicy for non-CPU modules is not "
                                  "implemented in ember")
    st = _State(module, mesh, reshard_after_forward, mp_policy, ignored_params)
    cls = type(module)
    if cls not in _CLASSES:
        _CLASSES[cls] = type(f"FSDP{cls.__name__}", (FSDPModule, cls), {})
    module.__class__ = _CLASSES[cls]
    module._fsdp_state = st
    module.register_forward_pre_hook(_pre_forward, prepend=True, with_kwargs=True)
    module.register_forward_hook(_post_forward, always_call=True)
    return module
