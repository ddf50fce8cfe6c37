"""``Optimizer``: the base class. It owns param groups, per-parameter state, hooks and the
torch-compatible ``state_dict``; a subclass is only its math (the MLX pattern).

A subclass sets ``defaults``, fills a parameter's state on first use in
``_init_state(p, state, group)`` (ember Tensors under torch's keys), and writes its update
one of two ways:

- ``_math(p, g, *buffers, scratch, step, group)`` over arrays, updating ``p`` and the per-element
  state ``buffers`` (named by ``_state_keys(group)``) in place. The base class ticks ``step``
  and runs it over cache-sized blocks, and for ``foreach`` over flat buffers holding many
  parameters at once (SGD, Adam/AdamW, Adagrad, RMSprop, Adamax, RAdam, Adadelta, Rprop);
- ``_update(p, g, state, group)`` when the state holds per-parameter scalars that change every
  step (NAdam's ``mu_product``, ASGD's ``eta`` and ``mu``).

Either way the base class has already negated ``g`` for ``maximize``, applied
``weight_decay`` (added to ``g``, or for ``decoupled_weight_decay`` multiplied into ``p``) and
viewed complex parameters as real pairs, so those options are written once.
See https://pytorch.org/docs/stable/optim.html.
"""
import functools
import warnings
from collections import OrderedDict, defaultdict
from copy import deepcopy
from itertools import chain

import numpy as np

from .. import _dtype
from .._backends import array_module
from .._tensor import Tensor
from ..autograd.grad_mode import enable_grad
from ..nn.modules._state_dict import _HookHandle

__all__ = ["Optimizer", "register_optimizer_step_pre_hook", "register_optimizer_step_post_hook"]


class _RequiredParameter:
    """Marks a hyper-parameter every param group must give (``optimizer.required``)."""

    def __repr__(self):
        return "<required parameter>"


required = _RequiredParameter()
_global_pre_hooks = OrderedDict()
_global_post_hooks = OrderedDict()


def register_optimizer_step_pre_hook(hook):
    """Register ``hook(optimizer, args, kwargs)`` to run before every optimizer's ``step``."""
    h = _HookHandle(_global_pre_hooks)
    _global_pre_hooks[h.id] = hook
    return h


def register_optimizer_step_post_hook(hook):
    """Register ``hook(optimizer, args, kwargs)`` to run after every optimizer's ``step``."""
    h = _HookHandle(_global_post_hooks)
    _global_post_hooks[h.id] = hook
    return h


def _check(ok, what, value):
    # torch's wording, e.g. "Invalid learning rate: -1.0", so user code matching on it still works.
    if not ok:
        raise ValueError(f"Invalid {what}: {value}")


def _check_lr(lr, foreach=None, capturable=False):
    if isinstance(lr, Tensor):
        if foreach and not capturable:
            raise ValueError("lr as a Tensor is not supported for capturable=False and "
                             "foreach=True")
        if lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
    _check(0.0 <= lr, "learning rate", lr)


def _check_common(lr, eps=0.0, betas=None, weight_decay=0.0):
    """The checks most optimizers share, in torch's order."""
    _check_lr(lr)
    _check(0.0 <= eps, "epsilon value", eps)
    if betas is not None:
        for i, b in enumerate(betas):
            _check(0.0 <= b < 1.0, f"beta parameter at index {i}", b)
    _check(0.0 <= weight_decay, "weight_decay value", weight_decay)


def _scalar_dtype():
    # NOTE: torch keeps step counters (and NAdam's mu_product, ASGD's eta/mu) in float32 unless
    # the default dtype is float64; the float32 rounding is part of the trajectory we match.
    return np.float64 if _dtype.get_default_dtype() is _dtype.float64 else np.float32


def _scalar(value):
    """A 0-dim state tensor of torch's scalar dtype (``torch.tensor(value)``)."""
    return Tensor._wrap(np.array(value, dtype=_scalar_dtype()))


def _zeros_like(p, fill=0):
    # a complex parameter is optimized as (real, imag) pairs, so both halves get the fill
    if fill and p._data.dtype.kind == "c":
        fill = complex(fill, fill)
    return _state_tensor(p, array_module(p._data).full_like(p._data, fill))


def _zeroed_state(self, p, state, group):
    """The ``_init_state`` of most optimizers: a step count, and zeros under each of
    ``_state_keys(group)``."""
    state["step"] = _scalar(0.0)
    for k in self._state_keys(group):
        state[k] = _zeros_like(p)


def _state_tensor(p, arr):
    """``arr`` as a state tensor of ``p``.

    NOTE: a sharded parameter's (a DTensor's) state is a DTensor sharded the same way, as
    torch's ops on DTensors give, so checkpoints of FSDP2 optimizer state know their offsets."""
    t = Tensor._wrap(arr, p.device)
    spec = getattr(p, "_spec", None)
    if spec is None:
        return t
    from ..distributed.tensor import DTensor
    return DTensor._make(t, *spec)


def _tick(state):
    """``state['step'] += 1`` in place; returns the new step as a Python float."""
    s = state["step"]._data
    s += 1
    return float(s)


# Elements per block (256 KiB of float32): the ~12 passes of an update then run on data that is
# still in cache, instead of streaming every array through memory a dozen times.
BLOCK = 1 << 16
# Largest parameter the foreach path flattens. It copies each one three times per step (its
# gradient and itself into the flat buffers, itself back), which costs more than a call of its
# own from about this size up.
FOREACH_MAX = 1 << 12


def _blocks(*arrays):
    """Matching 1-d blocks of same-shaped contiguous arrays, each tuple ending in a scratch
    array of the block's size.

    NOTE: NumPy runs an expression as one pass per operator; on a tile that fits in cache those
    passes cost a fraction of full-array passes.
    Non-contiguous arrays (rare for parameters) are yielded whole.
    """
    n, xp = arrays[0].size, array_module(arrays[0])
    # (a GPU runs each pass over the whole array at once: blocks would only add launches)
    if n <= BLOCK or xp is not np or not all(a.flags.c_contiguous for a in arrays):
        yield arrays + (xp.empty_like(arrays[0]),)
        return
    flat = [a.reshape(-1) for a in arrays]
    scratch = np.empty(BLOCK, arrays[0].dtype)
    for i in range(0, n, BLOCK):
        block = tuple(a[i:i + BLOCK] for a in flat)
        yield block + (scratch[:block[0].size],)


def _ema_(m, g, beta):
    """``m.lerp_(g, 1 - beta)`` in place, as ``(m - g) * beta + g`` (torch's rounding)."""
    m -= g
    m *= beta
    m += g


def _ema_sq_(xp, v, g, beta, tmp):
    """``v.mul_(beta).addcmul_(g, g, value=1 - beta)`` in place, through the scratch ``tmp``."""
    v *= beta
    xp.multiply(g, g, out=tmp)
    tmp *= 1 - beta
    v += tmp


def _hook_step(step):
    """Wrap a subclass's ``step`` so the step pre/post hooks run around it (once per class)."""
    @functools.wraps(step)
    def wrapper(self, *args, **kwargs):
        for pre in chain(_global_pre_hooks.values(), self._optimizer_step_pre_hooks.values()):
            result = pre(self, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError(f"{step} must return None or a tuple of (new_args, "
                                       f"new_kwargs), but got {result}.")
                args, kwargs = result
        out = step(self, *args, **kwargs)
        for post in chain(self._optimizer_step_post_hooks.values(), _global_post_hooks.values()):
            post(self, args, kwargs)
        return out
    wrapper.hooked = True
    return wrapper


def _run_closure(closure):
    """``closure()`` with grad mode on (a step runs under no_grad; the closure's backward
    needs a graph), or None without one."""
    if closure is None:
        return None
    with enable_grad():
        return closure()


class Optimizer:
    """Base class for all optimizers, like ``torch.optim.Optimizer``.

    Args:
        params (iterable): Tensors, ``(name, Tensor)`` pairs, or dicts of param groups.
        defaults (dict): default hyper-parameters for groups that do not set them.

    Example:
        >>> import ember
        >>> w = ember.nn.Parameter(ember.tensor([1.0, 2.0]))
        >>> opt = ember.optim.SGD([w], lr=0.5)
        >>> (w * w).sum().backward()
        >>> opt.step()
        >>> w
        Parameter containing:
        tensor([0., 0.], requires_grad=True)
        >>> opt.state_dict()["param_groups"][0]["params"]
        [0]
    """

    def __init__(self, params, defaults):
        self.defaults = defaults
        self._optimizer_step_pre_hooks = OrderedDict()
        self._optimizer_step_post_hooks = OrderedDict()
        self._optimizer_state_dict_pre_hooks = OrderedDict()
        self._optimizer_state_dict_post_hooks = OrderedDict()
        self._optimizer_load_state_dict_pre_hooks = OrderedDict()
        self._optimizer_load_state_dict_post_hooks = OrderedDict()
        self._patch_step_function()
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            "Tensors or dicts, but got " + _typename(params))
        self.state = defaultdict(dict)
        self.param_groups = []
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(dict(g))

    def _patch_step_function(self):
        cls = type(self)
        if not getattr(cls.step, "hooked", False):
            cls.step = _hook_step(cls.step)

    def __getstate__(self):
        return {"defaults": self.defaults, "state": self.state, "param_groups": self.param_groups}

    def __setstate__(self, state):
        self.__dict__.update(state)
        for name in ("step_pre", "step_post", "state_dict_pre", "state_dict_post",
                     "load_state_dict_pre", "load_state_dict_post"):
            self.__dict__.setdefault(f"_optimizer_{name}_hooks", OrderedDict())
        self._patch_step_function()
        self.defaults.setdefault("differentiable", False)
        for st in self.state.values():
            # state dicts from torch < 1.12 (or hand-made) keep `step` as a number
            if isinstance(st, dict) and "step" in st and not isinstance(st["step"], Tensor):
                st["step"] = _scalar(float(st["step"]))

    def __repr__(self):
        s = type(self).__name__ + " ("
        for i, group in enumerate(self.param_groups):
            s += f"\nParameter Group {i}\n"
            for key in sorted(group):
                if key != "params":
                    s += f"    {key}: {group[key]}\n"
        return s + ")"

    # ---- param groups ---------------------------------------------------------------------
    def add_param_group(self, param_group):
        """Add a dict of params (and per-group options) to ``param_groups``."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group)}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, "
                            "but the ordering of tensors in sets will change between runs. "
                            "Please use a list instead.")
        params = list(params)
        names = [p[0] for p in params if isinstance(p, tuple)]
        params = [p[1] if isinstance(p, tuple) else p for p in params]
        param_group["params"] = params
        if names:
            if len(names) != len(params):
                raise ValueError("all optimizer params should be with/without names. Some param "
                                 "names are missing")
            param_group["param_names"] = names
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is "
                                + _typename(p))
            if not self.defaults.get("differentiable") and not (p.is_leaf or p.retains_grad):
                raise ValueError("can't optimize a non-leaf Tensor")
        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError("parameter group didn't specify a value of required "
                                 f"optimization parameter {name}")
            param_group.setdefault(name, default)
        if len(params) != len({id(p) for p in params}):
            warnings.warn("optimizer contains a parameter group with duplicate parameters; in "
                          "future, this will cause an error; see "
                          "github.com/pytorch/pytorch/issues/40967 for more information",
                          stacklevel=3)
        seen = set()
        for group in self.param_groups:
            seen.update(id(p) for p in group["params"])
            if ("param_names" in param_group) != ("param_names" in group):
                txt = "with names" if "param_names" in param_group else "without names"
                raise ValueError("all optimizer param groups should be with/without names. "
                                 f"cannot add param group {txt} to the optimizer")
        if any(id(p) in seen for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    def zero_grad(self, set_to_none=True):
        """Reset the gradients of all optimized tensors (to None by default, else to zeros)."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    if p.grad.grad_fn is not None:
                        p.grad.detach_()
                    else:
                        p.grad.requires_grad_(False)
                    p.grad.zero_()

    # ---- stepping -------------------------------------------------------------------------
    def step(self, closure=None):
        """Update every parameter that has a gradient; returns ``closure()`` if one is given."""
        loss = _run_closure(closure)
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if isinstance(group["lr"], Tensor):             # the math takes Python scalars
                group = dict(group, lr=group["lr"].item())
            # NOTE: foreach=None (torch's "let the library choose") takes the flat path too: it
            # does the same arithmetic per element, so only the speed differs.
            if group.get("foreach") is not False and self._math is not None:
                # NOTE: as torch, a sparse gradient turns the foreach path off (for its param)
                sparse = [p for p in params if p.grad.is_sparse]
                params = self._step_foreach([p for p in params if not p.grad.is_sparse],
                                            group) + sparse
            for p in params:
                self._step_param(p, group)
        return loss

    def _step_param(self, p, group):
        g = self._grad(p, group)
        state = self.state[p]
        if not state:
            self._init_state(p, state, group)
        self._check_devices(p, state)
        arr = p._data
        if arr.dtype.kind == "c":
            # NOTE: as torch, a complex parameter is optimized as its (real, imag) pairs, so
            # Adam's g*g is |re|^2 and |im|^2 per component, not the complex square.
            arr, g, state = _as_real(arr), _as_real(g), _RealState(state, arr.dtype)
        g = self._decay(arr, g, group)
        self._update(arr, g, state, group)
        p._bump_version()

    def _check_devices(self, p, state):
        """torch's error for state left on another device than its parameter (a model moved
        by ``Module.to`` after the optimizer stepped)."""
        dev = p.device
        for v in state.values():
            if type(v) is Tensor and v.device is not dev and v.device != dev and v.dim():
                raise RuntimeError(f"{type(self).__name__}.step: Expected all tensors to be on "
                                   f"the same device, but found at least two devices, {dev} "
                                   f"and {v.device}!")

    def _grad(self, p, group):
        g = p.grad
        if g.is_sparse:
            g = self._sparse_grad(g)
        return -g._data if group.get("maximize") else g._data

    def _sparse_grad(self, g):
        """A sparse gradient as the dense one this optimizer's math takes; torch's error for
        optimizers without sparse support."""
        name = type(self).__name__
        hint = ", please consider SparseAdam instead" if name in ("Adam", "AdamW") else ""
        raise RuntimeError(f"{name} does not support sparse gradients{hint}")

    @staticmethod
    def _decay(p, g, group):
        """Apply ``weight_decay``: into ``p`` when decoupled (AdamW), else onto the gradient."""
        wd = group.get("weight_decay", 0)
        if wd:
            if group.get("decoupled_weight_decay"):
                p *= 1 - group["lr"] * wd
            else:
                g = g + wd * p
        return g

    def _init_state(self, p, state, group):
        """Fill a parameter's empty ``state`` (most optimizers: ``_zeroed_state``)."""

    # An optimizer written as array math sets `_math(p, g, *buffers, scratch, step, group)`
    # (updating p and the buffers in place) and `_state_keys(group)`, the names of the
    # per-element state it takes as `buffers`; it then gets blocked and foreach updates for free.
    _math = None

    def _state_keys(self, group):
        return ()

    def _update(self, p, g, state, group):
        step = _tick(state) if "step" in state else None
        for block in _blocks(p, g, *(state[k]._data for k in self._state_keys(group))):
            self._math(*block, step=step, group=group)

    def _step_foreach(self, params, group):
        """Update the small parameters of each dtype together over flat buffers; returns the
        ones left for the per-parameter path.

        NOTE: the win is Python overhead: one pass of ~12 NumPy calls for all the biases and
        norms instead of one per tensor. Tensors above ``FOREACH_MAX`` already run near memory
        speed alone, and flattening them would add three copies, so they stay per-parameter.
        """
        keys = self._state_keys(group)
        rest, buckets = [], {}
        for p in params:
            state = self.state[p]
            if not state:
                self._init_state(p, state, group)
            self._check_devices(p, state)
            ok = p.numel() <= FOREACH_MAX and p._data.flags.c_contiguous and \
                p._data.dtype.kind != "c" and all(
                state.get(k) is not None for k in keys)
            (buckets.setdefault((p._data.dtype, p.device), []) if ok else rest).append(p)
        for ps in buckets.values():
            steps = {float(self.state[p]["step"]._data) for p in ps if "step" in self.state[p]}
            if len(ps) < 2 or len(steps) > 1:       # nothing to gain, or per-tensor bias terms
                rest += ps
                continue
            bufs = self._flat_state(ps, keys)
            xp = array_module(ps[0]._data)
            g = xp.concatenate([p.grad._data.reshape(-1) for p in ps])
            if group.get("maximize"):
                xp.negative(g, out=g)
            x = xp.concatenate([p._data.reshape(-1) for p in ps])
            g = self._decay(x, g, group)
            step = None
            for p in ps:
                if "step" in self.state[p]:
                    step = _tick(self.state[p])
            for block in _blocks(x, g, *bufs):
                self._math(*block, step=step, group=group)
            offset = 0
            for p in ps:
                n = p._data.size
                p._data[...] = x[offset:offset + n].reshape(p._data.shape)
                p._bump_version()
                offset += n
        return rest

    def _flat_state(self, ps, keys):
        """One flat array per state key for ``ps``, with each parameter's state tensor a view
        of it. Rebuilt (from the current state) when the params or the state tensors changed,
        e.g. after ``load_state_dict``."""
        cache = self.__dict__.setdefault("_flat_cache", {})
        ids = tuple(id(p) for p in ps)
        hit = cache.get((ids, keys))
        if hit is not None and all(self.state[p][k]._data is v for k, views in zip(keys, hit[1])
                                   for p, v in zip(ps, views)):
            return hit[0]
        # drop buffers this one replaces (a param that missed a step changes the set)
        for old in [c for c in cache if not set(c[0]).isdisjoint(ids)]:
            del cache[old]
        bufs, all_views = [], []
        for k in keys:
            flat = array_module(ps[0]._data).concatenate([self.state[p][k]._data.reshape(-1)
                                                          for p in ps])
            views, offset = [], 0
            for p in ps:
                n = p._data.size
                views.append(flat[offset:offset + n].reshape(p._data.shape))
                self.state[p][k] = _state_tensor(p, views[-1])
                offset += n
            bufs.append(flat)
            all_views.append(views)
        cache[ids, keys] = (bufs, all_views)
        return bufs

    # ---- hooks ----------------------------------------------------------------------------
    def _register(self, hooks, hook, prepend=False):
        h = _HookHandle(hooks)
        hooks[h.id] = hook
        if prepend:
            hooks.move_to_end(h.id, last=False)
        return h

    def register_step_pre_hook(self, hook):
        """``hook(optimizer, args, kwargs) -> None or (args, kwargs)`` runs before ``step``."""
        return self._register(self._optimizer_step_pre_hooks, hook)

    def register_step_post_hook(self, hook):
        """``hook(optimizer, args, kwargs) -> None`` runs after ``step``."""
        return self._register(self._optimizer_step_post_hooks, hook)

    def register_state_dict_pre_hook(self, hook, prepend=False):
        return self._register(self._optimizer_state_dict_pre_hooks, hook, prepend)

    def register_state_dict_post_hook(self, hook, prepend=False):
        return self._register(self._optimizer_state_dict_post_hooks, hook, prepend)

    def register_load_state_dict_pre_hook(self, hook, prepend=False):
        return self._register(self._optimizer_load_state_dict_pre_hooks, hook, prepend)

    def register_load_state_dict_post_hook(self, hook, prepend=False):
        return self._register(self._optimizer_load_state_dict_post_hooks, hook, prepend)

    # ---- state dict -----------------------------------------------------------------------
    def state_dict(self):
        """``{'state': {index: {...}}, 'param_groups': [{..., 'params': [indices]}]}``, as torch.

        Parameters are numbered in group order; state values are the live state tensors.
        """
        for hook in self._optimizer_state_dict_pre_hooks.values():
            hook(self)
        index, groups = {}, []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            for p in group["params"]:
                index.setdefault(id(p), len(index))
            packed["params"] = [index[id(p)] for p in group["params"]]
            groups.append(packed)
        state = {(index[id(k)] if isinstance(k, Tensor) else k): v for k, v in self.state.items()}
        sd = {"state": state, "param_groups": groups}
        for hook in self._optimizer_state_dict_post_hooks.values():
            out = hook(self, sd)
            if out is not None:
                sd = out
        return sd

    def load_state_dict(self, state_dict):
        """Load a ``state_dict()`` from ember or torch (after converting its tensors)."""
        state_dict = state_dict.copy()
        for hook in self._optimizer_load_state_dict_pre_hooks.values():
            out = hook(self, state_dict)
            if out is not None:
                state_dict = out
        groups, saved = self.param_groups, deepcopy(state_dict["param_groups"])
        if len(groups) != len(saved):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match "
                             "the size of optimizer's group")
        id_map = dict(zip(chain.from_iterable(s["params"] for s in saved),
                          chain.from_iterable(g["params"] for g in groups)))
        state = defaultdict(dict)
        for k, v in state_dict["state"].items():
            if k in id_map:
                state[id_map[k]] = _cast(id_map[k], v, _group_flags(saved, k))
            else:
                state[k] = v
        for g, s in zip(groups, saved):
            s["params"] = g["params"]
            if "param_names" in g and "param_names" not in s:
                s["param_names"] = g["param_names"]
        self.__setstate__({"state": state, "param_groups": saved})
        for hook in self._optimizer_load_state_dict_post_hooks.values():
            hook(self)


def _as_real(a):
    return a.view(a.real.dtype) if a.dtype.kind == "c" else a


class _RealState(dict):
    """A complex parameter's state with its buffers viewed as real: in-place updates go through;
    a buffer the optimizer creates (SGD's momentum) is stored back as a complex view."""

    def __init__(self, state, dtype):
        super().__init__({k: Tensor._wrap(_as_real(v._data), v.device) if isinstance(
            v, Tensor) else v for k, v in state.items()})
        self._state, self._dtype = state, dtype

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        if isinstance(value, Tensor) and value.dim():
            value = Tensor._wrap(value._data.view(self._dtype), value.device)
        self._state[key] = value


def _group_flags(groups, index):
    for g in groups:
        if index in g["params"]:
            return g.get("fused", False) or g.get("capturable", False)
    return False


def _cast(param, value, fused_or_capturable, key=None):
    """Copy ``value`` onto ``param``'s dtype/device, keeping ``step`` counters as they are."""
    if isinstance(value, Tensor):
        if key == "step":
            return value.to(dtype=_dtype.float32, device=param.device) if fused_or_capturable \
                else value
        if param.is_floating_point():
            return value.to(dtype=param.dtype, device=param.device)
        return value.to(device=param.device)
    if isinstance(value, dict):
        return {k: _cast(param, v, fused_or_capturable, k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(param, v, fused_or_capturable) for v in value)
    return value


def _typename(obj):
    return obj.type() if isinstance(obj, Tensor) else type(obj).__module__ + "." + \
        type(obj).__qualname__
