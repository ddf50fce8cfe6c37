"""Model and optimizer state dicts keyed by canonical parameter names, as
``torch.distributed.checkpoint.state_dict``: the same keys whether the model is wrapped in
``DistributedDataParallel`` (its ``module.`` prefix is dropped), compiled (``_orig_mod.``) or
not, and optimizer state keyed by parameter name instead of by position, so a checkpoint
saved from one setup loads into another.

Example:
    >>> import ember
    >>> from ember.distributed.checkpoint.state_dict import get_state_dict
    >>> model = ember.nn.Linear(2, 1); opt = ember.optim.Adam(model.parameters())
    >>> msd, osd = get_state_dict(model, opt)
    >>> list(msd), list(osd["state"]), osd["param_groups"][0]["params"]
    (['weight', 'bias'], ['weight', 'bias'], ['weight', 'bias'])
"""
from dataclasses import dataclass

from . import _is_tensor

__all__ = ["StateDictOptions", "get_state_dict", "get_model_state_dict",
           "get_optimizer_state_dict", "set_state_dict", "set_model_state_dict",
           "set_optimizer_state_dict"]

_WRAPPERS = ("_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module")


@dataclass
class StateDictOptions:
    """How ``get_state_dict`` / ``set_state_dict`` work, as torch's.

    ``full_state_dict``: shard-aware tensors (DTensor) are gathered to whole tensors
    (``full_tensor()``). ``cpu_offload``: tensors are moved to the CPU; with
    ``full_state_dict`` too, only rank 0 gets the state dict (others get ``{}``).
    ``ignore_frozen_params``: leave out parameters with ``requires_grad=False``.
    ``strict``: passed to ``load_state_dict``. ``broadcast_from_rank0``: ``set_*`` take
    rank 0's (full) state dict and broadcast it. ``flatten_optimizer_state_dict``: optimizer
    state as flat ``state.<fqn>.<key>`` / ``param_groups.<fqn>.<key>`` entries.

    Example:
        >>> from ember.distributed.checkpoint.state_dict import StateDictOptions
        >>> StateDictOptions(full_state_dict=True).cpu_offload
        False
    """
    full_state_dict: bool = False
    cpu_offload: bool = False
    ignore_frozen_params: bool = False
    keep_submodule_prefixes: bool = True
    strict: bool = True
    broadcast_from_rank0: bool = False
    flatten_optimizer_state_dict: bool = False


def _fqn(model, key):
    """``key`` of ``model.state_dict()`` without wrapper levels (DDP's ``module.``, ...)."""
    from ...nn.parallel import DataParallel, DistributedDataParallel
    out, obj = [], model
    for name in key.split("."):
        skip = name in _WRAPPERS or (name == "module" and isinstance(
            obj, (DataParallel, DistributedDataParallel)))
        obj = getattr(obj, name, None)
        if not skip:
            out.append(name)
    return ".".join(out)


def _finish(sd, options):
    """Apply ``full_state_dict`` and ``cpu_offload`` to the tensors of a (nested) dict."""
    if not (options.full_state_dict or options.cpu_offload):
        return sd
    from .. import distributed_c10d as c10d

    def conv(v):
        if isinstance(v, dict):
            return {k: conv(e) for k, e in v.items()}
        if isinstance(v, list):
            return [conv(e) for e in v]
        if not _is_tensor(v):
            return v
        if options.full_state_dict and callable(getattr(v, "full_tensor", None)):
            v = v.full_tensor()
        return v.cpu() if options.cpu_offload else v
    sd = conv(sd)                       # on every rank: full_tensor() is a collective
    if options.full_state_dict and options.cpu_offload and c10d.is_initialized() and \
            c10d.get_rank() != 0:
        return {}
    return sd


def _options(options):
    return options or StateDictOptions()


def _optims(optimizers):
    from ...optim import Optimizer
    return [optimizers] if isinstance(optimizers, Optimizer) else list(optimizers)


def _names(model):
    """id(parameter) -> canonical name, shared parameters under their first name."""
    out = {}
    for k, p in model.named_parameters(remove_duplicate=False):
        out.setdefault(id(p), _fqn(model, k))
    return out


def _submodule_filter(model, submodules, options, sd):
    if not submodules:
        return sd
    prefixes = [_fqn(model, n) + "." for n, m in model.named_modules() if m in submodules]
    return {(k if options.keep_submodule_prefixes else k[len(p):]): v for k, v in sd.items()
            for p in prefixes if k.startswith(p)}


def get_model_state_dict(model, *, submodules=None, options=None):
    """``model.state_dict()`` with canonical keys (see the module doc); tensors are the
    live ones unless ``options`` copies them.

    Example:
        >>> import ember
        >>> from ember.distributed.checkpoint.state_dict import get_model_state_dict
        >>> list(get_model_state_dict(ember.nn.Sequential(ember.nn.Linear(2, 2))))
        ['0.weight', '0.bias']
    """
    options = _options(options)
    frozen = {_fqn(model, k) for k, p in model.named_parameters() if not p.requires_grad}
    sd = {_fqn(model, k): v for k, v in model.state_dict().items()}
    sd = {k: v for k, v in sd.items() if not (options.ignore_frozen_params and k in frozen)}
    return _finish(_submodule_filter(model, submodules, options, sd), options)


def _init_optim_state(optim):
    """Make an optimizer that has not stepped create its state (a step with zero gradients
    and lr 0), so that there are tensors to load a checkpoint into, as torch does."""
    import ember
    if optim.state or any(p.grad is not None for g in optim.param_groups for p in g["params"]):
        return
    for g in optim.param_groups:
        for p in g["params"]:
            if p.requires_grad:
                p.grad = ember.zeros_like(p)
    lrs = [g["lr"] for g in optim.param_groups if "lr" in g]
    for g in optim.param_groups:
        if "lr" in g:
            g["lr"] = ember.tensor(0.0) if _is_tensor(g["lr"]) else 0.0
    optim.step()
    for g in optim.param_groups:
        if "lr" in g:
            g["lr"] = lrs.pop(0)
    optim.zero_grad(set_to_none=True)


def get_optimizer_state_dict(model, optimizers, *, submodules=None, options=None):
    """The optimizers' state dicts merged into one, keyed by parameter name:
    ``{"state": {fqn: {...}}, "param_groups": [{..., "params": [fqn, ...]}]}``.

    Example:
        >>> import ember
        >>> from ember.distributed.checkpoint.state_dict import get_optimizer_state_dict
        >>> m = ember.nn.Linear(2, 1); opt = ember.optim.SGD(m.parameters(), lr=0.1)
        >>> get_optimizer_state_dict(m, opt)["param_groups"][0]["params"]
        ['weight', 'bias']
    """
    options, names = _options(options), _names(model)
    state, groups = {}, []
    for optim in _optims(optimizers):
        _init_optim_state(optim)
        osd = optim.state_dict()
        order = [p for g in optim.param_groups for p in g["params"]]
        state.update({names[id(order[i])]: {k: _as_shard_of(order[i], v) for k, v in s.items()}
                      for i, s in osd["state"].items()})
        for g, pg in zip(osd["param_groups"], optim.param_groups):
            groups.append({**g, "params": [names[id(p)] for p in pg["params"]]})
    osd = {"state": state, "param_groups": groups}
    if options.flatten_optimizer_state_dict:
        osd = {**{f"state.{f}.{k}": v for f, s in state.items() for k, v in s.items()},
               **{f"param_groups.{f}.{k}": v for g in groups for f in g["params"]
                  for k, v in g.items() if k != "params"}}
    return _finish(osd, options)


def _as_shard_of(param, v):
    """A sharded parameter's optimizer state held as plain local tensors (ember's FSDP),
    seen as DTensors like the parameter (sharing memory), so that checkpoints place and
    re-shard them; torch's optimizer state is DTensor already."""
    if not (callable(getattr(param, "to_local", None)) and _is_tensor(v) and v.dim() and
            not callable(getattr(v, "to_local", None)) and
            tuple(v.shape) == tuple(param.to_local().shape)):
        return v
    from ..tensor import DTensor
    return DTensor.from_local(v, param.device_mesh, param.placements, shape=tuple(param.shape))


def get_state_dict(model, optimizers, *, submodules=None, options=None):
    """``(get_model_state_dict(model), get_optimizer_state_dict(model, optimizers))``.

    Example:
        >>> import ember, tempfile
        >>> import ember.distributed.checkpoint as dcp
        >>> from ember.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
        >>> m = ember.nn.Linear(2, 1); opt = ember.optim.Adam(m.parameters())
        >>> msd, osd = get_state_dict(m, opt); d = tempfile.mkdtemp()
        >>> _ = dcp.save({"model": msd, "optim": osd}, checkpoint_id=d)
        >>> m2 = ember.nn.Linear(2, 1); opt2 = ember.optim.Adam(m2.parameters())
        >>> msd2, osd2 = get_state_dict(m2, opt2)
        >>> dcp.load({"model": msd2, "optim": osd2}, checkpoint_id=d)
        >>> set_state_dict(m2, opt2, model_state_dict=msd2, optim_state_dict=osd2)
        <All keys matched successfully>
        >>> ember.equal(m2.weight, m.weight)
        True
    """
    return (get_model_state_dict(model, submodules=submodules, options=options),
            get_optimizer_state_dict(model, optimizers, submodules=submodules, options=options))


def _from_rank0(sd, options):
    if not options.broadcast_from_rank0:
        return sd
    if not options.full_state_dict:
        raise ValueError("broadcast_from_rank0 requires full_state_dict=True")
    from .. import distributed_c10d as c10d
    box = [sd]
    c10d.broadcast_object_list(box, src=0)
    return box[0]


def set_model_state_dict(model, model_state_dict, *, options=None):
    """Load a state dict with canonical keys into ``model`` (``module.`` prefixes and the
    like put back); returns ``load_state_dict``'s missing and unexpected keys.

    Example:
        >>> import ember
        >>> from ember.distributed.checkpoint.state_dict import set_model_state_dict
        >>> m = ember.nn.Linear(2, 1)
        >>> set_model_state_dict(m, {"weight": ember.ones(1, 2), "bias": ember.zeros(1)})
        <All keys matched successfully>
    """
    options = _options(options)
    sd = _from_rank0(model_state_dict, options)
    keys = {_fqn(model, k): k for k in model.state_dict()}
    return model.load_state_dict({keys.get(k, k): v for k, v in sd.items()},
                                 strict=options.strict)


def _unflatten_optim(osd, optims, names):
    if "state" in osd and "param_groups" in osd:
        return osd
    state, groups = {}, []
    for optim in optims:
        for pg in optim.param_groups:
            fqns = [names[id(p)] for p in pg["params"]]
            for f in fqns:
                pre = f"state.{f}."
                st = {k[len(pre):]: v for k, v in osd.items() if k.startswith(pre)}
                if st:
                    state[f] = st
            pre = f"param_groups.{fqns[0]}."
            groups.append({**{k[len(pre):]: v for k, v in osd.items() if k.startswith(pre)},
                           "params": fqns})
    return {"state": state, "param_groups": groups}


def set_optimizer_state_dict(model, optimizers, optim_state_dict, *, options=None):
    """Load a state dict from ``get_optimizer_state_dict`` (keyed by parameter name) into
    ``optimizers``; each optimizer takes the groups whose parameters it holds.

    Example:
        >>> import ember
        >>> from ember.distributed.checkpoint.state_dict import (get_optimizer_state_dict,
        ...                                                      set_optimizer_state_dict)
        >>> m = ember.nn.Linear(2, 1); opt = ember.optim.SGD(m.parameters(), lr=0.1)
        >>> osd = get_optimizer_state_dict(m, opt); osd["param_groups"][0]["lr"] = 0.5
        >>> set_optimizer_state_dict(m, opt, osd); opt.param_groups[0]["lr"]
        0.5
    """
    options, names, optims = _options(options), _names(model), _optims(optimizers)
    osd = _unflatten_optim(_from_rank0(optim_state_dict, options), optims, names)
    by_param = {f: g for g in osd["param_groups"] for f in g["params"]}
    for optim in optims:
        _init_optim_state(optim)
        order = [names[id(p)] for g in optim.param_groups for p in g["params"]]
        groups = []
        for pg in optim.param_groups:
            fqns = [names[id(p)] for p in pg["params"]]
            if fqns[0] not in by_param:
                raise ValueError(f"set_optimizer_state_dict: no parameter group holds "
                                 f"'{fqns[0]}'")
            groups.append({**by_param[fqns[0]], "params": [order.index(f) for f in fqns]})
        plain = {f: {k: v.to_local() if callable(getattr(v, "to_local", None)) and not
                     callable(getattr(optim.state.get(p, {}).get(k), "to_local", None))
                     else v for k, v in osd["state"][f].items()}
                 for f, p in zip(order, (p for g in optim.param_groups for p in g["params"]))
                 if f in osd["state"]}
        optim.load_state_dict({"state": {order.index(f): s for f, s in plain.items()},
                               "param_groups": groups})


def set_state_dict(model, optimizers, *, model_state_dict, optim_state_dict, options=None):
    """``set_model_state_dict`` and ``set_optimizer_state_dict``; returns the model's
    missing and unexpected keys."""
    set_optimizer_state_dict(model, optimizers, optim_state_dict, options=options)
    return set_model_state_dict(model, model_state_dict, options=options)
