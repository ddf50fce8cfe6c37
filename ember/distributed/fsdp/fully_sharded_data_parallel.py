"""FSDP1: ``FullyShardedDataParallel``, as ``torch.distributed.fsdp``. Each wrapper owns one
unit: its module's parameters (except those of wrapped descendants) flattened into one
``FlatParameter`` and sharded evenly over the group (see _unit.py for the collectives)."""
import contextlib
import os
from collections import OrderedDict

import numpy as np

from ..._tensor import Tensor
from ...autograd import grad_mode
from ...nn.modules.module import Module
from ...nn.parameter import Parameter
from .. import distributed_c10d as c10d
from ..device_mesh import DeviceMesh
from ..tensor import DTensor, Replicate, Shard, _rows, init_device_mesh
from ._unit import DEPTH, ORDER, Unit, cast_floats, collect, enter_forward
from .api import (BackwardPrefetch, FullOptimStateDictConfig, FullStateDictConfig,
                  LocalOptimStateDictConfig, LocalStateDictConfig, ShardedOptimStateDictConfig,
                  ShardedStateDictConfig, ShardingStrategy, StateDictSettings, StateDictType)
from .wrap import _recursive_wrap

_PREFIX = "_fsdp_wrapped_module."
_SUMMONED = [0]         # summon_full_params contexts open: names lose the wrapper prefix
_IN_STATE_DICT = [False]
_CONFIGS = {StateDictType.FULL_STATE_DICT: (FullStateDictConfig, FullOptimStateDictConfig),
            StateDictType.SHARDED_STATE_DICT: (ShardedStateDictConfig,
                                               ShardedOptimStateDictConfig),
            StateDictType.LOCAL_STATE_DICT: (LocalStateDictConfig, LocalOptimStateDictConfig)}


class FlatParameter(Parameter):
    """A wrapper's shard of its flattened, padded parameters (1-D)."""


class _FlatUnit(Unit):
    def __init__(self, holder, params, slots, group, strategy, mp, use_orig_params, replica,
                 forward_prefetch, backward_prefetch):
        super().__init__(params, slots, group, flat=True,
                         reshard_after_forward=None if strategy in (
                             ShardingStrategy.FULL_SHARD, ShardingStrategy.HYBRID_SHARD)
                         else False,
                         param_dtype=mp and mp.param_dtype, reduce_dtype=mp and mp.reduce_dtype,
                         replicate=strategy is ShardingStrategy.NO_SHARD, replica_group=replica)
        self.forward_prefetch = ORDER if forward_prefetch else None
        self.backward_prefetch = backward_prefetch and ORDER
        self.prefetch_post = backward_prefetch is BackwardPrefetch.BACKWARD_POST
        (self.local,) = self.local_pieces(self._full_arrays) if params else (np.empty(0),)
        del self._full_arrays
        self.holder, self.orig, self.params = holder, use_orig_params, params
        self.shown_full = True               # so that _show(False) below places the shards
        if use_orig_params:
            a = self.rank * (self.chunks[0] if params else 0)
            self.spans = []
            for p, o, n in zip(params, np.cumsum([0] + self.numels[:-1]), self.numels):
                lo, hi = max(o, a) - a, max(min(o + n, a + self.local.size), max(o, a)) - a
                self.spans.append((lo, hi))
                p._data, p._storage = self.local[lo:hi], None
        elif params:
            for p in params:        # the flat shard replaces them: free their full values
                p._data, p._storage = np.empty(0, p._data.dtype), None
            device = params[0].device
            self.flat_param = FlatParameter(Tensor._wrap(self.local, device),
                                            any(p.requires_grad for p in params))
            holder.register_parameter("_flat_param", self.flat_param)
        self._show(False)

    def _show(self, full):
        """Which objects the modules show under the original names: the unsharded leaves
        (full) or the shards; without use_orig_params the leaves always stay reachable as
        plain attributes and only summon_full_params registers them as parameters."""
        if full == self.shown_full or not self.params:
            return
        self.shown_full = full
        if not self.orig:
            if full:
                self.holder._parameters.pop("_flat_param")
            else:
                self.holder._parameters["_flat_param"] = self.flat_param
        for owner, name, i in self.slots:
            if self.orig:
                owner._parameters[name] = self.unsharded[i] if full else self.params[i]
            elif full:
                owner.__dict__.pop(name, None)
                owner._parameters[name] = self.unsharded[i]
            else:
                owner._parameters.pop(name, None)
                owner.__dict__[name] = self.unsharded[i]

    def local_arrays(self):
        return [self.local]

    def sharded_grads(self):
        if self.orig:
            return [p.grad for p in self.params if p.grad is not None]
        return [self.flat_param.grad] if self.params and self.flat_param.grad is not None \
            else []

    def accumulate_grads(self, arrays):
        (g,) = arrays
        targets = [(p, g[lo:hi]) for p, (lo, hi) in zip(self.params, self.spans)] \
            if self.orig else [(self.flat_param, g)]
        for p, a in targets:
            if p.grad is None:
                p.grad = Tensor._wrap(a, p.device)
            else:
                p.grad._data += a

    def show(self, full):
        if self.orig and not _SUMMONED[0]:
            self._show(full)


def _row_shard(v, unit):
    """``v`` (the same full tensor on every rank) as a DTensor of its rows, as torch's:
    Shard(0) over ``unit``'s shard group, after Replicate() over its replicate group under
    HYBRID_SHARD (a (replicate, shard) mesh: every replica holds the same shard)."""
    mesh = getattr(unit, "state_dict_mesh", None)
    if mesh is None:
        group, replica = unit.group, unit.replica_group
        ranks = c10d.get_process_group_ranks(group)
        if replica is not None:                 # every replica's shard group, in its order
            ranks, shard = [None] * c10d.get_world_size(replica), ranks
            c10d.all_gather_object(ranks, shard, group=replica)
        mesh = unit.state_dict_mesh = DeviceMesh.from_group(
            [group] if replica is None else [replica, group], v.device.type, mesh=ranks)
    k = mesh.ndim - 1
    a, b, _ = _rows(v.shape[0] if v.dim() else 1, mesh.size(k), mesh.get_local_rank(k))
    local = np.array(v._data.reshape((-1,) + tuple(v.shape[1:]))[a:b])
    return DTensor._make(Tensor._wrap(local, v.device), mesh, [Replicate()] * k + [Shard(0)],
                         v.shape)


def _groups(process_group, device_mesh, strategy, auto_wrap_policy):
    """(shard group, replicate group or None) of a wrapper, as torch's _init_process_group."""
    if process_group is not None and device_mesh is not None:
        raise ValueError("Cannot pass both process_group and device_mesh at the same time. "
                         "Please just pass only one of them.")
    if strategy not in (ShardingStrategy.HYBRID_SHARD, ShardingStrategy._HYBRID_SHARD_ZERO2):
        return (device_mesh.get_group(0) if device_mesh is not None else process_group or
                c10d._default_pg("FullyShardedDataParallel")), None
    if device_mesh is None and process_group is None:
        if auto_wrap_policy is None:
            raise ValueError(f"Manual wrapping with {strategy} requires explicit "
                             "specification of process group or device_mesh.")
        world = c10d.get_world_size()
        per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        device_mesh = init_device_mesh("cpu", (world // per_node, per_node))
    if device_mesh is not None:
        if device_mesh.ndim != 2:
            raise ValueError(f"Expected device_mesh to have ndim=2 but got {device_mesh.ndim}")
        return device_mesh.get_group(1), device_mesh.get_group(0)
    if not (isinstance(process_group, tuple) and len(process_group) == 2):
        raise ValueError("Expected process_group to be passed in as either None or "
                         f"Tuple[dist.ProcessGroup, dist.ProcessGroup] but got "
                         f"{type(process_group)}")
    return process_group


def _units(module):
    return [m._unit for m in module.modules() if isinstance(m, FullyShardedDataParallel)]


class FullyShardedDataParallel(Module):
    """Wrap ``module`` so its parameters are sharded over the group: with ``auto_wrap_policy``
    its submodules are wrapped first, each a unit that all-gathers its parameters for its own
    forward and backward and reduce-scatters its gradients.

    Args:
        module (Module): the model (or part) to shard.
        process_group (ProcessGroup): default: the default group.
        sharding_strategy (ShardingStrategy): FULL_SHARD (default), SHARD_GRAD_OP, NO_SHARD;
            HYBRID_SHARD / _HYBRID_SHARD_ZERO2: FULL_SHARD / SHARD_GRAD_OP within the first
            group of ``process_group=(shard group, replicate group)`` (or dim 1 of a 2-D
            ``device_mesh``; default: the ranks of a node, ``LOCAL_WORLD_SIZE`` of them),
            gradients then all-reduced across the second (dim 0).
        auto_wrap_policy: ``ModuleWrapPolicy`` or a policy function (``wrap.py``).
        mixed_precision (MixedPrecision): compute and reduction dtypes.
        ignored_modules (iterable of Module): left unsharded.
        device_id (int or device): the CUDA device of the module (ember: moves it there).
        sync_module_states (bool): broadcast parameters and buffers from the first rank.
        use_orig_params (bool): ``parameters()`` yields the original parameters (each a 1-D
            slice of this rank's shard, possibly empty) instead of one FlatParameter.
        forward_prefetch (bool): a unit's forward first starts the all-gather of the unit
            that ran next in the previous forward.
        backward_prefetch (BackwardPrefetch or None): when a unit's backward starts the
            all-gather of the next unit to run backward: before its gradients are computed
            (BACKWARD_PRE, default) or after (BACKWARD_POST); None: never.
        limit_all_gathers (bool): accepted: a unit prefetches at most one unit ahead, so at
            most two units' all-gathers are in flight, the bound torch's limiter enforces.

    Example:
        >>> import ember, ember.distributed as dist
        >>> from ember.distributed.fsdp import FullyShardedDataParallel as FSDP
        >>> from ember.distributed.fsdp.wrap import ModuleWrapPolicy
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> net = ember.nn.Sequential(ember.nn.Linear(2, 4), ember.nn.Linear(4, 1))
        >>> model = FSDP(net, auto_wrap_policy=ModuleWrapPolicy({ember.nn.Linear}))
        >>> [n for n, _ in model.named_parameters()]
        ['_fsdp_wrapped_module.0._fsdp_wrapped_module._flat_param',
         '_fsdp_wrapped_module.1._fsdp_wrapped_module._flat_param']
        >>> model(ember.ones(3, 2)).sum().backward()
        >>> list(model.state_dict())
        ['0.weight', '0.bias', '1.weight', '1.bias']
        >>> dist.destroy_process_group()
    """

    def __init__(self, module, process_group=None, sharding_strategy=None, cpu_offload=None,
                 auto_wrap_policy=None, backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
                 mixed_precision=None, ignored_modules=None, param_init_fn=None, device_id=None,
                 sync_module_states=False, forward_prefetch=False, limit_all_gathers=True,
                 use_orig_params=False, ignored_states=None, device_mesh=None):
        super().__init__()
        strategy = sharding_strategy or ShardingStrategy.FULL_SHARD
        group, replica = _groups(process_group, device_mesh, strategy, auto_wrap_policy)
        ignored_modules = set(ignored_modules or ())
        ignored = [p for m in ignored_modules for p in m.parameters()]
        for s in ignored_states or ():
            if isinstance(s, Module):
                ignored_modules.add(s)
                ignored.extend(s.parameters())
            else:
                ignored.append(s)
        if device_id is not None:
            module.to(device_id if not isinstance(device_id, int) else f"cuda:{device_id}")
        if mixed_precision is not None and mixed_precision.keep_low_precision_grads:
            raise NotImplementedError("FullyShardedDataParallel: keep_low_precision_grads=True "
                                      "is not implemented in ember")
        prefetch = dict(forward_prefetch=forward_prefetch, backward_prefetch=backward_prefetch)
        kwargs = dict(process_group=(group, replica) if replica else group,
                      sharding_strategy=strategy, cpu_offload=cpu_offload,
                      mixed_precision=mixed_precision, ignored_modules=ignored_modules,
                      sync_module_states=sync_module_states, use_orig_params=use_orig_params,
                      limit_all_gathers=limit_all_gathers, **prefetch)
        if auto_wrap_policy is not None:
            _recursive_wrap(module, auto_wrap_policy, lambda m: FullyShardedDataParallel(
                m, **kwargs), ignored_modules, {id(p) for p in ignored}, True)
        if sync_module_states:
            from ...nn.parallel.distributed import _broadcast_coalesced
            tensors = [*module.parameters(), *module.buffers()]
            for g in (replica, group) if tensors else ():    # across nodes, then within
                if g is not None:
                    _broadcast_coalesced(tensors, g)
        if mixed_precision is not None and mixed_precision.buffer_dtype is not None:
            for m in module.modules():
                for k, b in m._buffers.items():
                    if b is not None and b.is_floating_point():
                        m._buffers[k] = b.to(mixed_precision.buffer_dtype)
        self._fsdp_wrapped_module = module
        for m in module.modules():
            if isinstance(m, FullyShardedDataParallel):
                m._is_root = False
        self._is_root, self.mixed_precision = True, mixed_precision
        self.sharding_strategy, self.process_group = strategy, group
        params, slots = collect(module, lambda m: isinstance(m, FullyShardedDataParallel)
                                or m in ignored_modules, ignored)
        self._unit = _FlatUnit(module, params, slots, group, strategy, mixed_precision,
                               use_orig_params, replica, **prefetch)
        self._state_dict_type = StateDictType.FULL_STATE_DICT
        self._state_dict_config, self._optim_state_dict_config = FullStateDictConfig(), \
            FullOptimStateDictConfig()

    @property
    def module(self):
        """The wrapped module."""
        return self._fsdp_wrapped_module

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            inner = self._modules.get("_fsdp_wrapped_module")
            if inner is None:                   # (during __init__)
                raise
            return getattr(inner, name)

    def __getitem__(self, key):
        return self._fsdp_wrapped_module.__getitem__(key)

    def forward(self, *args, **kwargs):
        is_root = enter_forward(self, _units)
        try:
            self._unit.pre_forward()
            mp = self.mixed_precision
            if mp is not None and mp.param_dtype is not None and (
                    mp.cast_root_forward_inputs if is_root else mp.cast_forward_inputs):
                args, kwargs = cast_floats(args, mp.param_dtype), cast_floats(kwargs,
                                                                              mp.param_dtype)
            out = self._fsdp_wrapped_module(*args, **kwargs)
            self._unit.post_forward(out, is_root)
        finally:
            DEPTH[0] -= 1
        return out

    def named_parameters(self, *args, **kwargs):
        for name, p in super().named_parameters(*args, **kwargs):
            yield (name.replace(_PREFIX, "") if _SUMMONED[0] else name), p

    @staticmethod
    def fsdp_modules(module, root_only=False):
        """The FSDP modules under ``module`` (itself included), or only the roots."""
        mods = [m for m in module.modules() if isinstance(m, FullyShardedDataParallel)]
        return [m for m in mods if m._is_root] if root_only else mods

    @contextlib.contextmanager
    def no_sync(self):
        """Inside, backward keeps the unsharded gradients (no reduce-scatter); the first
        backward after it reduce-scatters the accumulated sum."""
        units = _units(self)
        for u in units:
            u.sync = False
        try:
            yield
        finally:
            for u in units:
                u.sync = True

    # ---------------------------------------------------------------- full parameters
    @staticmethod
    @contextlib.contextmanager
    def summon_full_params(module, recurse=True, writeback=True, rank0_only=False,
                           offload_to_cpu=False, with_grads=False):
        """Inside, every FSDP unit under ``module`` shows its full parameters under their
        original names; with ``writeback``, changes are copied back into the shards."""
        if rank0_only and writeback:
            raise ValueError("writeback=True and rank0_only=True is not supported, as model "
                             "parameter shapes will be different across ranks, and writing to "
                             "them can lead to inconsistencies across ranks when the context "
                             "is exited.")
        if with_grads:
            raise NotImplementedError("summon_full_params(with_grads=True) is not implemented "
                                      "in ember")
        units = _units(module) if recurse else [module._unit]
        shown = []
        _SUMMONED[0] += 1
        try:
            with grad_mode.no_grad():
                for u in units:
                    was = u.is_unsharded
                    u.unshard()
                    shown.append((u, u.shown_full, was))
                    u._show(True)
            yield
        finally:
            _SUMMONED[0] -= 1
            for u, full, was in reversed(shown):
                if writeback:
                    u.write_back()
                u._show(full)
                if not was:
                    u.reshard()

    def clip_grad_norm_(self, max_norm, norm_type=2.0):
        """Clip the gradients of all units so their global norm is at most ``max_norm``;
        returns the norm before clipping (one all-reduce over the shards)."""
        if not self._is_root:
            raise RuntimeError("`clip_grad_norm_()` should only be called on the root FSDP "
                               "instance")
        p = float(norm_type)
        units = _units(self)
        mine = [g for u in units if not u.replicate for g in u.sharded_grads()]
        shared = [g for u in units if u.replicate for g in u.sharded_grads()]
        dt = (mine + shared)[0]._data.dtype if mine + shared else np.float32

        def part(gs):
            a = [np.abs(g._data.astype(np.float64)) for g in gs if g.numel()]
            if p == float("inf"):
                return max((x.max() for x in a), default=0.0)
            return sum(float((x ** p).sum()) for x in a)
        t = Tensor._wrap(np.array([part(mine)], np.float64))
        c10d.all_reduce(t, op=c10d.ReduceOp.MAX if p == float("inf") else c10d.ReduceOp.SUM,
                        group=self.process_group)
        total = max(t.item(), part(shared)) if p == float("inf") else \
            (t.item() + part(shared)) ** (1.0 / p)
        coef = max_norm / (total + 1e-6)
        if coef < 1:
            for g in mine + shared:
                g._data *= np.asarray(coef, g._data.dtype)
        return Tensor._wrap(np.asarray(total, dt))

    # ---------------------------------------------------------------- state dicts
    @staticmethod
    def set_state_dict_type(module, state_dict_type, state_dict_config=None,
                            optim_state_dict_config=None):
        """Set the state-dict kind of every FSDP module under ``module``; returns the
        previous ``StateDictSettings``."""
        sd_cls, osd_cls = _CONFIGS[state_dict_type]
        prev = None
        for m in module.modules():
            if isinstance(m, FullyShardedDataParallel):
                prev = prev or StateDictSettings(m._state_dict_type, m._state_dict_config,
                                                 m._optim_state_dict_config)
                m._state_dict_type = state_dict_type
                m._state_dict_config = state_dict_config or sd_cls()
                m._optim_state_dict_config = optim_state_dict_config or osd_cls()
        return prev

    @staticmethod
    def get_state_dict_type(module):
        """The ``StateDictSettings`` of the FSDP modules under ``module``."""
        for m in module.modules():
            if isinstance(m, FullyShardedDataParallel):
                return StateDictSettings(m._state_dict_type, m._state_dict_config,
                                         m._optim_state_dict_config)
        raise ValueError("no FSDP modules in the given module")

    @staticmethod
    @contextlib.contextmanager
    def state_dict_type(module, state_dict_type, state_dict_config=None,
                        optim_state_dict_config=None):
        """Inside, ``state_dict()`` / ``load_state_dict()`` of FSDP modules under ``module``
        use ``state_dict_type`` (FULL_STATE_DICT, SHARDED_STATE_DICT, LOCAL_STATE_DICT)."""
        prev = FullyShardedDataParallel.set_state_dict_type(
            module, state_dict_type, state_dict_config, optim_state_dict_config)
        try:
            yield
        finally:
            FullyShardedDataParallel.set_state_dict_type(
                module, prev.state_dict_type, prev.state_dict_config,
                prev.optim_state_dict_config)

    def state_dict(self, *args, **kwargs):
        kind = self._state_dict_type
        if _IN_STATE_DICT[0] or kind is StateDictType.LOCAL_STATE_DICT:
            return super().state_dict(*args, **kwargs)
        _IN_STATE_DICT[0] = True
        try:
            with self.summon_full_params(self, writeback=False):
                raw = super().state_dict(*args, **kwargs)
                full_ids = {id(u) for unit in _units(self) for u in unit.unsharded}
                params = {k for k, p in super().state_dict(keep_vars=True).items()
                          if id(p) in full_ids}
        finally:
            _IN_STATE_DICT[0] = False
        out = OrderedDict()
        for k, v in raw.items():
            if kind is StateDictType.SHARDED_STATE_DICT and k in params:
                v = _row_shard(v, self._unit)
            out[k.replace(_PREFIX, "")] = v
        if kind is StateDictType.FULL_STATE_DICT and self._state_dict_config.rank0_only and \
                c10d.get_rank(self.process_group) != 0:
            return OrderedDict()
        return out

    # ---------------------------------------------------------------- optimizer state
    @staticmethod
    def _unit_names(model):
        """(unit, the sharded objects the optimizer sees, each one's original names in the
        unit's order) for every unit under ``model``, names without wrapper prefixes."""
        names = {id(m): n for n, m in model.named_modules()}
        out = []
        for u in _units(model):
            fqns = [None] * len(u.unsharded)
            for owner, name, i in u.slots:
                if fqns[i] is None:
                    fqns[i] = f"{names[id(owner)]}.{name}".lstrip(".").replace(_PREFIX, "")
            if fqns:
                out.append((u, u.params if u.orig else [u.flat_param], fqns))
        return out

    @staticmethod
    def optim_state_dict(model, optim, optim_state_dict=None, group=None):
        """``optim``'s state keyed by the original parameter names, each per-element state
        the full tensor of the parameter's shape (FULL_STATE_DICT) or its Shard(0) DTensor
        (SHARDED_STATE_DICT): the shards are all-gathered unit by unit (call on all ranks)."""
        sd = optim.state_dict() if optim_state_dict is None else optim_state_dict
        index = {}
        for g in optim.param_groups:
            for p in g["params"]:
                index.setdefault(id(p), len(index))
        units = FullyShardedDataParallel._unit_names(model)
        kinds = [{} for _ in units]             # per unit: key -> (per-element?, dtype, value)
        for kind, (u, objs, _) in zip(kinds, units):
            for o in objs:
                for k, v in sd["state"].get(index.get(id(o)), {}).items():
                    per_element = isinstance(v, Tensor) and v.dim() > 0
                    kind.setdefault(k, (per_element, str(v._data.dtype) if per_element else
                                        None, None if per_element else v))
        everyone = [None] * c10d.get_world_size(group)     # ranks lacking state learn keys
        c10d.all_gather_object(everyone, kinds, group=group)
        sharded = FullyShardedDataParallel.get_state_dict_type(model).state_dict_type is \
            StateDictType.SHARDED_STATE_DICT
        state, names_of = {}, {}
        for i, (u, objs, fqns) in enumerate(units):
            merged = {}
            for theirs in everyone:
                for k, val in theirs[i].items():
                    merged.setdefault(k, val)
            for k, (per_element, dt, value) in merged.items():
                if not per_element:
                    for f in fqns:
                        state.setdefault(f, {})[k] = value
                    continue
                local = np.zeros(u.local.size, dt)
                spans = u.spans if u.orig else [(0, u.local.size)]
                for o, (lo, hi) in zip(objs, spans):
                    v = sd["state"].get(index.get(id(o)), {}).get(k)
                    if v is not None:
                        local[lo:hi] = v._data.reshape(-1)
                for f, full in zip(fqns, u.gather([local], local.dtype)):
                    t = Tensor._wrap(full, u.unsharded[0].device)
                    state.setdefault(f, {})[k] = _row_shard(t, u) if sharded else t
            for o, f in zip(objs, [[f] for f in fqns] if u.orig else [fqns]):
                names_of[index.get(id(o))] = f
        groups = [dict(g, params=[f for i in g["params"] for f in names_of.get(i, [i])])
                  for g in sd["param_groups"]]
        return {"state": state, "param_groups": groups}

    @staticmethod
    def optim_state_dict_to_load(model, optim, optim_state_dict, is_named_optimizer=False,
                                 load_directly=False, group=None):
        """The inverse of ``optim_state_dict``: a state dict ``optim.load_state_dict`` takes,
        each rank keeping its shards (with ``load_directly``, loaded at once)."""
        src = optim_state_dict
        index = {}
        for g in optim.param_groups:
            for p in g["params"]:
                index.setdefault(id(p), len(index))
        state, index_of = {}, {}
        for u, objs, fqns in FullyShardedDataParallel._unit_names(model):
            keys = list(dict.fromkeys(k for f in fqns for k in src["state"].get(f, {})))
            for k in keys:
                vals = [src["state"].get(f, {}).get(k) for f in fqns]
                vals = [v.full_tensor() if isinstance(v, DTensor) else v for v in vals]
                ref = next(v for v in vals if v is not None)
                if not (isinstance(ref, Tensor) and ref.dim() > 0):
                    for o in objs:
                        state.setdefault(index[id(o)], {})[k] = ref.clone() if isinstance(
                            ref, Tensor) else ref
                    continue
                fulls = [v._data if v is not None else np.zeros(s, ref._data.dtype)
                         for v, s in zip(vals, u.shapes)]
                (local,) = u.local_pieces(fulls)
                spans = u.spans if u.orig else [(0, local.size)]
                for o, (lo, hi) in zip(objs, spans):
                    state.setdefault(index[id(o)], {})[k] = Tensor._wrap(local[lo:hi].copy(),
                                                                         o.device)
            for o, f in zip(objs, [[f] for f in fqns] if u.orig else [fqns]):
                index_of.update((name, index[id(o)]) for name in f)
        groups = [dict(g, params=list(dict.fromkeys(index_of.get(f, f) for f in g["params"])))
                  for g in src["param_groups"]]
        out = {"state": state, "param_groups": groups}
        if load_directly:
            optim.load_state_dict(out)
        return out

    def load_state_dict(self, state_dict, strict=True, assign=False):
        if _IN_STATE_DICT[0] or self._state_dict_type is StateDictType.LOCAL_STATE_DICT:
            return super().load_state_dict(state_dict, strict, assign)
        state_dict = OrderedDict((k, v.full_tensor() if isinstance(v, DTensor) else v)
                                 for k, v in state_dict.items())
        _IN_STATE_DICT[0] = True
        try:
            with self.summon_full_params(self, writeback=True):
                real = {k.replace(_PREFIX, ""): k for k in super().state_dict(keep_vars=True)}
                return super().load_state_dict(OrderedDict((real.get(k, k), v) for k, v in
                                                           state_dict.items()), strict, assign)
        finally:
            _IN_STATE_DICT[0] = False
