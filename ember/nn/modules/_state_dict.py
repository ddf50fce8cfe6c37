"""``Module``'s state dict: ``state_dict``, ``load_state_dict`` and their hooks (a mixin of
``Module``), with torch's keys, metadata and errors; and the handle every module hook returns."""
import functools
import itertools
from collections import OrderedDict, namedtuple

from ..._hooks import RemovableHandle
from ..._tensor import Tensor
from ..parameter import Parameter

_IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])
_IncompatibleKeys.__repr__ = lambda self: ("<All keys matched successfully>" if not
                                           self.missing_keys and not self.unexpected_keys else
                                           f"_IncompatibleKeys(missing_keys={self.missing_keys}, "
                                           f"unexpected_keys={self.unexpected_keys})")


class _HookHandle(RemovableHandle):
    """The handle of hooks kept in an ordered dict by id (torch.utils.hooks.RemovableHandle)."""

    def __init__(self, hooks, extra=()):
        super().__init__(hooks, extra_dict=list(extra))


class StateDictMixin:
    """The state-dict half of ``Module`` (its attributes are made by ``Module.__init__``)."""

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = b if keep_vars else b.detach()

    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        """An OrderedDict of parameters and persistent buffers by dotted name, with the
        ``_metadata`` attribute torch writes (module versions)."""
        if args:
            destination = args[0] if len(args) > 0 else destination
            prefix = args[1] if len(args) > 1 else prefix
            keep_vars = args[2] if len(args) > 2 else keep_vars
        if destination is None:
            destination = OrderedDict()
            destination._metadata = OrderedDict()
        meta = getattr(destination, "_metadata", None)
        if meta is not None:
            meta[prefix[:-1]] = {"version": self._version}
        for hook in self._state_dict_pre_hooks.values():
            hook(self, prefix, keep_vars)
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(destination=destination, prefix=prefix + name + ".",
                             keep_vars=keep_vars)
        for hook in self._state_dict_hooks.values():
            r = hook(self, destination, prefix, {})
            if r is not None:
                destination = r
        return destination

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        from ...autograd.grad_mode import no_grad
        for hook in self._load_state_dict_pre_hooks.values():
            hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                 error_msgs)
        persistent = {k: v for k, v in self._buffers.items()
                      if k not in self._non_persistent_buffers_set}
        local = {k: v for k, v in itertools.chain(self._parameters.items(), persistent.items())
                 if v is not None}
        assign = local_metadata.get("assign_to_params_buffers", False)
        for name, param in local.items():
            key = prefix + name
            if key not in state_dict:
                if strict:
                    missing_keys.append(key)
                continue
            value = state_dict[key]
            if not isinstance(value, Tensor):
                error_msgs.append(f'While copying the parameter named "{key}", expected '
                                  f"torch.Tensor or Tensor-like object from checkpoint but "
                                  f"received {type(value)}")
                continue
            if tuple(value.shape) != tuple(param.shape):
                error_msgs.append(f"size mismatch for {key}: copying a param with shape "
                                  f"{value.shape} from checkpoint, the shape in current model "
                                  f"is {param.shape}.")
                continue
            if assign:
                if isinstance(param, Parameter):
                    value = value if isinstance(value, Parameter) else \
                        Parameter(value, param.requires_grad)
                    self._parameters[name] = value
                else:
                    self._buffers[name] = value
            else:
                with no_grad():
                    param.copy_(value)
        if strict:
            for key in state_dict:
                if key.startswith(prefix) and key != prefix + "_extra_state":
                    rest = key[len(prefix):].split(".", 1)[0]
                    if rest not in self._modules and rest not in local:
                        unexpected_keys.append(key)

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copy parameters and buffers from ``state_dict``; with ``strict``, every key must
        match. Raises one RuntimeError listing all problems; returns missing/unexpected keys."""
        if not hasattr(state_dict, "keys"):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing, unexpected, errors = [], [], []
        metadata = getattr(state_dict, "_metadata", None)
        state_dict = OrderedDict(state_dict)

        def load(module, prefix=""):
            local_meta = dict(metadata.get(prefix[:-1], {})) if metadata is not None else {}
            if assign:
                local_meta["assign_to_params_buffers"] = True
            module._load_from_state_dict(state_dict, prefix, local_meta, True, missing,
                                         unexpected, errors)
            for name, child in module._modules.items():
                if child is not None:
                    load(child, prefix + name + ".")
            keys = _IncompatibleKeys(missing, unexpected)
            for hook in module._load_state_dict_post_hooks.values():
                hook(module, keys)

        load(self)
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: " +
                              ", ".join(f'"{k}"' for k in unexpected) + ". ")
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: " +
                              ", ".join(f'"{k}"' for k in missing) + ". ")
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {self._get_name()}:\n\t" +
                               "\n\t".join(errors))
        return _IncompatibleKeys(missing, unexpected)

    def register_state_dict_pre_hook(self, hook):
        h = _HookHandle(self._state_dict_pre_hooks)
        self._state_dict_pre_hooks[h.id] = hook
        return h

    def register_state_dict_post_hook(self, hook):
        h = _HookHandle(self._state_dict_hooks)
        self._state_dict_hooks[h.id] = hook
        return h

    _register_state_dict_hook = register_state_dict_post_hook

    def register_load_state_dict_pre_hook(self, hook):
        h = _HookHandle(self._load_state_dict_pre_hooks)
        self._load_state_dict_pre_hooks[h.id] = functools.partial(hook, self)
        return h

    def _register_load_state_dict_pre_hook(self, hook, with_module=False):
        h = _HookHandle(self._load_state_dict_pre_hooks)
        self._load_state_dict_pre_hooks[h.id] = functools.partial(hook, self) if with_module \
            else hook
        return h

    def register_load_state_dict_post_hook(self, hook):
        h = _HookHandle(self._load_state_dict_post_hooks)
        self._load_state_dict_post_hooks[h.id] = hook
        return h
