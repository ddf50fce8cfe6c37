"""``Module``: the base class of every layer and model, as in ``torch.nn.Module``."""
import copy
import itertools
from collections import OrderedDict

from ..._tensor import Tensor
from ..parameter import Parameter
from ._state_dict import StateDictMixin, _HookHandle

_global_forward_hooks, _global_forward_pre_hooks = OrderedDict(), OrderedDict()


def _addindent(s, n):
    lines = s.split("\n")
    return lines[0] if len(lines) == 1 else lines[0] + "\n" + "\n".join(
        " " * n + line for line in lines[1:])


def _changed(module, defaults):
    """``, name=value`` for each of ``module``'s options that differs from its default in
    ``defaults`` (torch's extra_repr lists only those)."""
    out = ""
    for k, d in defaults.items():
        v = getattr(module, k)
        # (as torch's reprs, a bool or None option counts as changed unless it is the default)
        if (v is not d) if d is None or isinstance(d, bool) else v != d:
            out += f", {k}={v}"
    return out


def _name_failing_module(e, module):
    """Prefix ``e``'s message with the path of the module whose forward raised it, as seen
    from ``module``: ``model.encoder.layers.3.linear1 (Linear(...)): <message>``.

    Each enclosing module call adds itself to the chain kept on the exception and rewrites the
    message from the original, so the outermost call (the model the user called) has the last
    word. Exceptions whose args are not one string keep their message."""
    chain = getattr(e, "_ember_modules", None)
    if chain is None:
        if len(e.args) != 1 or not isinstance(e.args[0], str):
            return
        chain = e._ember_modules = []
        e._ember_message = e.args[0]
    chain.append(module)
    leaf = chain[0]
    where = f"{leaf._get_name()}({leaf.extra_repr()})"
    if len(chain) > 1:
        names = []
        for outer, inner in zip(chain[:0:-1], chain[-2::-1]):
            names.append(next((n for n, m in outer.named_modules() if m is inner),
                              inner._get_name()))
        where = f"model.{'.'.join(names)} ({where})"
    e.args = (f"{where}: {e._ember_message}",)


class Module(StateDictMixin):
    """Base class for all neural network modules; subclasses define ``forward``.

    Assigning a Parameter, Module or (via ``register_buffer``) Tensor to an attribute registers
    it, so ``parameters()``, ``state_dict()``, ``to()`` and friends see it.

    Example:
        >>> import ember
        >>> class Net(ember.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.fc = ember.nn.Linear(4, 2)
        ...     def forward(self, x):
        ...         return self.fc(x).relu()
        >>> net = Net()
        >>> [name for name, _ in net.named_parameters()]
        ['fc.weight', 'fc.bias']
        >>> net(ember.ones(3, 4)).shape
        torch.Size([3, 2])
    """

    _version = 1
    training: bool
    call_super_init = False

    def __init__(self, *args, **kwargs):
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments")
        d = self.__dict__
        d["training"] = True
        d["_parameters"], d["_buffers"], d["_modules"] = {}, {}, {}
        d["_non_persistent_buffers_set"] = set()
        for name in ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
                     "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_backward_hooks",
                     "_backward_pre_hooks", "_state_dict_hooks", "_state_dict_pre_hooks",
                     "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks"):
            d[name] = OrderedDict()
        d["_is_full_backward_hook"] = None

    forward = None

    # ---- registration -----------------------------------------------------------------------
    def register_parameter(self, name, param):
        """Add a parameter (or None) under ``name``."""
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        self._check_name(name, "parameter")
        if param is None:
            self._parameters[name] = None
            return
        if not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter "
                            f"'{name}' (torch.nn.Parameter or None required)")
        if param.grad_fn is not None:
            raise ValueError(f"Cannot assign non-leaf Tensor to parameter '{name}'. Model "
                             f"parameters must be created explicitly. To express '{name}' as a "
                             "function of another Tensor, compute the value in the forward() "
                             "method.")
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        """Add a buffer (state that is not a parameter, e.g. running statistics)."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        self._check_name(name, "buffer")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' "
                            "(torch Tensor or None required)")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name, module):
        """Add a child module under ``name``."""
        if not isinstance(module, Module) and module is not None:
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        if not isinstance(name, str):
            raise TypeError(f"module name should be a string. Got {type(name).__name__}")
        if "." in name or name == "":
            raise KeyError(f'module name can\'t contain ".", got: {name}' if name else
                           'module name can\'t be empty string ""')
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        self._modules[name] = module

    register_module = add_module

    def _check_name(self, name, what):
        if not isinstance(name, str):
            raise TypeError(f"{what} name should be a string. Got {type(name).__name__}")
        if "." in name or name == "":
            raise KeyError(f'{what} name can\'t contain "."' if name else
                           f'{what} name can\'t be empty string ""')
        if hasattr(self, name) and name not in self._parameters and name not in self._buffers:
            raise KeyError(f"attribute '{name}' already exists")

    def __setattr__(self, name, value):
        d = self.__dict__
        params, buffers, modules = d.get("_parameters"), d.get("_buffers"), d.get("_modules")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._remove_from(name, d, buffers, modules)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                "(torch.nn.Parameter or None expected)")
            self.register_parameter(name, value)
        elif isinstance(value, Module):
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self._remove_from(name, d, params, buffers)
            modules[name] = value
        elif modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module "
                                f"'{name}' (torch.nn.Module or None expected)")
            modules[name] = value
        elif buffers is not None and name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                "(torch.Tensor or None expected)")
            buffers[name] = value
        elif hasattr(value, "_buffer_persistent") and buffers is not None:
            self._remove_from(name, d, params, modules)
            self.register_buffer(name, value, value._buffer_persistent)
        else:
            object.__setattr__(self, name, value)

    @staticmethod
    def _remove_from(name, *dicts):
        for dd in dicts:
            if dd is not None and name in dd:
                del dd[name]

    def __getattr__(self, name):
        d = self.__dict__
        for key in ("_parameters", "_buffers", "_modules"):
            store = d.get(key)
            if store is not None and name in store:
                return store[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for key in ("_parameters", "_buffers", "_modules"):
            if name in self.__dict__.get(key, {}):
                del self.__dict__[key][name]
                self._non_persistent_buffers_set.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        return sorted(set(object.__dir__(self)) | set(self._parameters) | set(self._buffers) |
                      set(self._modules))

    # ---- traversal ------------------------------------------------------------------------------
    def _named_members(self, get, prefix="", recurse=True, remove_duplicate=True):
        seen = set()
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse \
            else [(prefix, self)]
        for mod_prefix, mod in mods:
            for k, v in get(mod):
                if v is None or (remove_duplicate and id(v) in seen):
                    continue
                if remove_duplicate:
                    seen.add(id(v))
                yield (mod_prefix + ("." if mod_prefix else "") + k, v)

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        """``(name, Parameter)`` pairs, e.g. ``('encoder.0.weight', p)``; shared ones once."""
        return self._named_members(lambda m: m._parameters.items(), prefix, recurse,
                                   remove_duplicate)

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_members(lambda m: m._buffers.items(), prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def named_children(self):
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self):
        for _, m in self.named_children():
            yield m

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        """``(path, module)`` for this module and every descendant, depth first."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is None:
                continue
            yield from m.named_modules(memo, prefix + ("." if prefix else "") + name,
                                       remove_duplicate)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def get_submodule(self, target):
        """The submodule at dotted path ``target`` (``""`` is this module)."""
        if target == "":
            return self
        mod = self
        for item in target.split("."):
            if not hasattr(mod, item):
                raise AttributeError(f"{mod._get_name()} has no attribute `{item}`")
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError(f"`{item}` is not an nn.Module")
        return mod

    def get_parameter(self, target):
        path, _, name = target.rpartition(".")
        mod = self.get_submodule(path)
        if not hasattr(mod, name):
            raise AttributeError(f"{mod._get_name()} has no attribute `{name}`")
        p = getattr(mod, name)
        if not isinstance(p, Parameter):
            raise AttributeError(f"`{name}` is not an nn.Parameter")
        return p

    def get_buffer(self, target):
        path, _, name = target.rpartition(".")
        mod = self.get_submodule(path)
        if name not in mod._buffers:
            raise AttributeError(f"`{name}` is not a buffer")
        return mod._buffers[name]

    # ---- modes, grads, conversion -------------------------------------------------------------
    def train(self, mode=True):
        """Set training mode here and in every descendant; returns self."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for m in self.children():
            m.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        """Reset the gradients of all parameters (to None by default)."""
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad = p.grad.detach()
                p.grad.zero_()

    def apply(self, fn):
        """Call ``fn`` on every submodule (children first) and then on self."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def _apply(self, fn, recurse=True):
        if recurse:
            for m in self.children():
                m._apply(fn)
        from ...autograd.grad_mode import no_grad
        for key, p in self._parameters.items():
            if p is None:
                continue
            with no_grad():
                new = fn(p)
            if new is p:
                continue
            # NOTE: like torch (with the default future flag), the Parameter object is kept and
            # its data swapped, so optimizers holding it stay valid.
            p.data = new
            if p.grad is not None:
                with no_grad():
                    g = fn(p.grad)
                p.grad = g
        for key, b in self._buffers.items():
            if b is not None:
                self._buffers[key] = fn(b)
        return self

    def to(self, *args, **kwargs):
        """Move and/or cast parameters and buffers: ``to(device)``, ``to(dtype)``,
        ``to(tensor)``, ``to(memory_format=...)`` (4-D and 5-D ones); floating dtypes only
        change floating tensors."""
        from ... import _dtype
        from ..._tensor import parse_to_args
        dtype, device = parse_to_args(args, kwargs.get("dtype"), kwargs.get("device"))
        if dtype is not None:
            dtype = _dtype.to_dtype(dtype)
            if dtype.category < _dtype._FLOAT:
                raise TypeError(f"nn.Module.to only accepts floating point or complex dtypes, "
                                f"but got desired dtype={dtype}")

        fmt = kwargs.get("memory_format")

        def convert(t):
            dt = dtype if dtype is not None and t.dtype.category >= _dtype._FLOAT else None
            return t.to(device=device, dtype=dt, memory_format=fmt if t.dim() in (4, 5) else None)
        return self._apply(convert)

    def cpu(self):
        return self._apply(lambda t: t.cpu())

    def cuda(self, device=None):
        return self._apply(lambda t: t.cuda(device))

    def _cast(self, dtype):
        return self._apply(lambda t: t.to(dtype) if t.is_floating_point() else t)

    def float(self):
        from ... import float32
        return self._cast(float32)

    def double(self):
        from ... import float64
        return self._cast(float64)

    def half(self):
        from ... import float16
        return self._cast(float16)

    def bfloat16(self):
        from ... import bfloat16
        return self._cast(bfloat16)

    def type(self, dst_type):
        return self._apply(lambda t: t.type(dst_type))

    def to_empty(self, *, device=None, recurse=True):
        from ..._ops.creation import empty_like
        return self._apply(lambda t: empty_like(t, device=device), recurse)

    # ---- hooks and calling --------------------------------------------------------------------
    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """``hook(module, args)`` (or ``(module, args, kwargs)``) runs before forward and may
        return replacement args."""
        h = _HookHandle(self._forward_pre_hooks, (self._forward_pre_hooks_with_kwargs,))
        self._forward_pre_hooks[h.id] = hook
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs[h.id] = True
        if prepend:
            self._forward_pre_hooks.move_to_end(h.id, last=False)
        return h

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False, always_call=False):
        """``hook(module, args, output)`` (or with kwargs) runs after forward and may return a
        replacement output; ``always_call`` runs it even if forward raised."""
        h = _HookHandle(self._forward_hooks, (self._forward_hooks_with_kwargs,
                                              self._forward_hooks_always_called))
        self._forward_hooks[h.id] = hook
        if with_kwargs:
            self._forward_hooks_with_kwargs[h.id] = True
        if always_call:
            self._forward_hooks_always_called[h.id] = True
        if prepend:
            self._forward_hooks.move_to_end(h.id, last=False)
        return h

    def register_full_backward_pre_hook(self, hook, prepend=False):
        """``hook(module, grad_output)`` runs when the gradient w.r.t. the module's outputs is
        computed; may return a replacement grad_output."""
        h = _HookHandle(self._backward_pre_hooks)
        self._backward_pre_hooks[h.id] = hook
        if prepend:
            self._backward_pre_hooks.move_to_end(h.id, last=False)
        return h

    def register_full_backward_hook(self, hook, prepend=False):
        """``hook(module, grad_input, grad_output)`` runs when the gradients w.r.t. the
        module's inputs are computed; may return a replacement grad_input."""
        h = _HookHandle(self._backward_hooks)
        self._backward_hooks[h.id] = hook
        if prepend:
            self._backward_hooks.move_to_end(h.id, last=False)
        return h

    def register_backward_hook(self, hook):
        return self.register_full_backward_hook(hook)

    def _call_impl(self, *args, **kwargs):
        forward = self.forward
        if forward is None:
            raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required '
                                      '"forward" function')
        # NOTE: a try block costs nothing until something raises (Python >= 3.11), so the
        # module path in error messages is free on the success path.
        try:
            if not (self._forward_hooks or self._forward_pre_hooks or self._backward_hooks or
                    self._backward_pre_hooks or _global_forward_hooks or
                    _global_forward_pre_hooks):
                return forward(*args, **kwargs)
            return self._call_with_hooks(forward, args, kwargs)
        except Exception as e:
            _name_failing_module(e, self)
            raise

    __call__ = _call_impl

    def _call_with_hooks(self, forward, args, kwargs):
        for hid, hook in itertools.chain(_global_forward_pre_hooks.items(),
                                         self._forward_pre_hooks.items()):
            if hid in self._forward_pre_hooks_with_kwargs:
                r = hook(self, args, kwargs)
                if r is not None:
                    args, kwargs = r
            else:
                r = hook(self, args)
                if r is not None:
                    args = r if isinstance(r, tuple) else (r,)
        bw = None
        if self._backward_hooks or self._backward_pre_hooks:
            from ._backward_hooks import BackwardHook
            bw = BackwardHook(self)
            args = bw.setup_input_hook(args)
        try:
            result = forward(*args, **kwargs)
        except Exception:
            for hid, hook in self._forward_hooks.items():
                if hid in self._forward_hooks_always_called:
                    try:
                        hook(self, args, None)
                    except Exception:
                        pass
            raise
        for hid, hook in itertools.chain(_global_forward_hooks.items(),
                                         self._forward_hooks.items()):
            r = hook(self, args, kwargs, result) if hid in self._forward_hooks_with_kwargs \
                else hook(self, args, result)
            if r is not None:
                result = r
        if bw is not None:
            result = bw.setup_output_hook(result)
        return result

    # ---- printing, copying --------------------------------------------------------------------
    def _get_name(self):
        return type(self).__name__

    def extra_repr(self):
        """Extra text shown inside this module's repr (override in layers)."""
        return ""

    def __repr__(self):
        extra = self.extra_repr()
        lines = extra.split("\n") if extra else []
        for name, m in self._modules.items():
            lines.append(f"({name}): " + _addindent(repr(m), 2))
        body = self._get_name() + "("
        if lines:
            if len(lines) == 1 and not self._modules:
                body += lines[0]
            else:
                body += "\n  " + "\n  ".join(lines) + "\n"
        return body + ")"

    def __getstate__(self):
        return self.__dict__.copy()

    def __setstate__(self, state):
        self.__dict__.update(state)

    def share_memory(self):
        for t in (*self.parameters(), *self.buffers()):
            t.share_memory_()
        return self

    def __deepcopy__(self, memo):
        new = object.__new__(type(self))
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            object.__setattr__(new, k, copy.deepcopy(v, memo))
        return new
