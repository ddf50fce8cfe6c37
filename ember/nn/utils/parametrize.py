"""Parametrizations: ``module.weight`` computed on access from unconstrained tensors, as
``torch.nn.utils.parametrize``.

Registering one moves the tensor to ``module.parametrizations.<name>.original`` (or
``original0``, ``original1``... when ``right_inverse`` returns several), swaps the module's
class for a subclass ``Parametrized<Class>`` that has a property ``<name>``, and so gives the
same state_dict keys as torch.
"""
import collections
from contextlib import contextmanager

from ..._tensor import Tensor
from ...autograd.grad_mode import no_grad
from ..modules.container import ModuleDict, ModuleList
from ..parameter import Parameter

_cache_enabled = 0
_cache = {}


@contextmanager
def cached():
    """Within this context each parametrized tensor is computed once and reused.

    Example:
        >>> import ember
        >>> from ember.nn.utils import parametrize
        >>> m = ember.nn.Linear(2, 2)
        >>> _ = ember.nn.utils.parametrizations.weight_norm(m)
        >>> with parametrize.cached():
        ...     m.weight is m.weight
        True
    """
    global _cache, _cache_enabled
    _cache_enabled += 1
    try:
        yield
    finally:
        _cache_enabled -= 1
        if not _cache_enabled:
            _cache = {}


def _register_parameter_or_buffer(module, name, x):
    if isinstance(x, Parameter):
        module.register_parameter(name, x)
    else:
        module.register_buffer(name, x)


def _set(dest, src):
    # NOTE: torch calls ``dest.set_(src)``: dest keeps its identity (optimizers holding it stay
    # valid) and takes src's storage, shape and dtype.
    dest.data = src.detach()


def _check_same(head, y, x, y_name, x_name):
    """Raise torch's ValueError when ``x`` differs from ``y`` in dtype or shape; ``head`` has
    one ``{}`` for the attribute."""
    for attr in ("dtype", "shape"):
        if getattr(x, attr) != getattr(y, attr):
            raise ValueError(head.format(attr) + f"\n{y_name}.{attr}: {getattr(y, attr)}\n"
                             f"{x_name}{'.' if x_name != 'returned' else ' '}{attr}: "
                             f"{getattr(x, attr)}")


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor and its unconstrained original(s); the type of
    ``module.parametrizations[name]``. Created by :func:`register_parametrization`."""

    def __init__(self, modules, original, unsafe=False):
        if len(modules) == 0:
            raise ValueError("ParametrizationList requires one or more modules.")
        super().__init__(modules)
        self.unsafe = unsafe
        shape, dtype = original.shape, original.dtype
        with no_grad():
            new = original
            for m in reversed(self):
                if hasattr(m, "right_inverse"):
                    try:
                        new = m.right_inverse(new)
                    except NotImplementedError:
                        pass
        if not isinstance(new, (Tensor, collections.abc.Sequence)):
            raise ValueError("'right_inverse' must return a Tensor or a Sequence of tensors "
                             f"(list, tuple...). Got {type(new).__name__}")
        self.is_tensor = isinstance(new, Tensor)
        self.ntensors = 1 if self.is_tensor else len(new)
        if self.is_tensor:
            for attr in ("dtype", "device"):
                if getattr(original, attr) != getattr(new, attr):
                    raise ValueError(f"When `right_inverse` outputs one tensor, it may not "
                                     f"change the {attr}.\noriginal.{attr}: "
                                     f"{getattr(original, attr)}\nright_inverse(original)."
                                     f"{attr}: {getattr(new, attr)}")
            with no_grad():
                _set(original, new)
            _register_parameter_or_buffer(self, "original", original)
        else:
            for i, t in enumerate(new):
                if not isinstance(t, Tensor):
                    raise ValueError("'right_inverse' must return a Tensor or a Sequence of "
                                     f"tensors (list, tuple...). Got element {i} of the "
                                     f"sequence with type {type(t).__name__}.")
                if isinstance(original, Parameter):
                    t = Parameter(t, original.requires_grad)
                t.requires_grad_(original.requires_grad)
                _register_parameter_or_buffer(self, f"original{i}", t)
        if not self.unsafe:
            z = self()
            if not isinstance(z, Tensor):
                raise ValueError(f"A parametrization must return a tensor. Got {type(z).__name__}.")
            if z.dtype != dtype or z.shape != shape:
                attr = "dtype" if z.dtype != dtype else "shape"
                raise ValueError(f"Registering a parametrization may not change the {attr} of "
                                 "the tensor, unless `unsafe` flag is enabled.\nunparametrized "
                                 f"{attr}: {dtype if attr == 'dtype' else shape}\nparametrized "
                                 f"{attr}: {getattr(z, attr)}")

    def right_inverse(self, value):
        """Set the original(s) so that the parametrized tensor becomes ``value``."""
        with no_grad():
            for m in reversed(self):
                if not hasattr(m, "right_inverse"):
                    raise RuntimeError(f"parametrization {type(m).__name__} does not implement "
                                       "right_inverse.")
                value = m.right_inverse(value)
            if self.is_tensor:
                if not isinstance(value, Tensor):
                    raise ValueError(f"`right_inverse` should return a tensor. Got "
                                     f"{type(value).__name__}")
                if value.dtype != self.original.dtype:
                    raise ValueError(f"The tensor returned by `right_inverse` has dtype "
                                     f"{value.dtype} while `original` has dtype "
                                     f"{self.original.dtype}")
                _set(self.original, value)
                return
            if not isinstance(value, collections.abc.Sequence):
                raise ValueError("'right_inverse' must return a sequence of tensors. Got "
                                 f"{type(value).__name__}.")
            if len(value) != self.ntensors:
                raise ValueError("'right_inverse' must return a sequence of tensors of length "
                                 f"{self.ntensors}. Got a sequence of length {len(value)}.")
            for i, t in enumerate(value):
                orig = getattr(self, f"original{i}")
                if orig.dtype != t.dtype:
                    raise ValueError(f"Tensor {i} returned by `right_inverse` has dtype "
                                     f"{t.dtype} while `original{i}` has dtype {orig.dtype}")
                _set(orig, t)

    def forward(self):
        if self.is_tensor:
            x = self[0](self.original)
        else:
            x = self[0](*(getattr(self, f"original{i}") for i in range(self.ntensors)))
        for m in list(self)[1:]:
            x = m(x)
        return x


def _getstate(self):
    raise RuntimeError("Serialization of parametrized modules is only supported through "
                       "state_dict(). See:\nhttps://pytorch.org/tutorials/beginner/"
                       "saving_loading_models.html#saving-loading-a-general-checkpoint-for-"
                       "inference-and-or-resuming-training")


def _inject_new_class(module):
    """Give ``module`` a class of its own, so a property can be added for it alone."""
    cls = module.__class__
    module.__class__ = type(f"Parametrized{cls.__name__}", (cls,), {"__getstate__": _getstate})


def _inject_property(module, name):
    def get(self):
        plist = self.parametrizations[name]
        if not _cache_enabled:
            return plist()
        key = (id(self), name)
        if _cache.get(key) is None:
            _cache[key] = plist()
        return _cache[key]

    def set_(self, value):
        self.parametrizations[name].right_inverse(value)

    setattr(module.__class__, name, property(get, set_))


def register_parametrization(module, tensor_name, parametrization, *, unsafe=False):
    """Make ``module.<tensor_name>`` the output of ``parametrization`` applied to an
    unconstrained original; a second call chains another parametrization. See
    https://pytorch.org/docs/stable/nn.html#module-torch.nn.utils.parametrize

    Args:
        module (Module): owner of the parameter or buffer.
        tensor_name (str): its name.
        parametrization (Module): ``forward(X)``, optionally ``right_inverse(Y)``.
        unsafe (bool): skip the checks that dtype and shape are kept. Default: False.

    Example:
        >>> import ember
        >>> from ember.nn.utils import parametrize
        >>> class Symmetric(ember.nn.Module):
        ...     def forward(self, X):
        ...         return X.triu() + X.triu(1).mT
        >>> m = parametrize.register_parametrization(ember.nn.Linear(3, 3), "weight",
        ...                                          Symmetric())
        >>> bool((m.weight == m.weight.mT).all()), type(m).__name__
        (True, 'ParametrizedLinear')
        >>> list(m.state_dict())
        ['bias', 'parametrizations.weight.original']
    """
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        if not unsafe:
            y = getattr(module, tensor_name)
            x = parametrization(y)
            if not isinstance(x, Tensor):
                raise ValueError(f"A parametrization must return a tensor. Got {type(x).__name__}.")
            _check_same("Registering a parametrization may not change the {} of the tensor, "
                        "unless the `unsafe` flag is enabled.", y, x, f"module.{tensor_name}",
                        f"parametrization(module.{tensor_name})")
            if hasattr(parametrization, "right_inverse"):
                try:
                    z = parametrization.right_inverse(x)
                except NotImplementedError:
                    pass
                else:
                    if not isinstance(z, Tensor):
                        raise ValueError("parametrization.right_inverse must return a tensor. "
                                         f"Got: {type(z).__name__}")
                    _check_same("The tensor returned by parametrization.right_inverse must "
                                "have the same {} as module." + tensor_name + ", unless the "
                                "`unsafe` flag is enabled.", y, z, f"module.{tensor_name}",
                                "returned")
        plist = module.parametrizations[tensor_name]
        plist.append(parametrization)
        plist.unsafe |= unsafe
    elif tensor_name in module._buffers or tensor_name in module._parameters:
        original = getattr(module, tensor_name)
        plist = ParametrizationList([parametrization], original, unsafe=unsafe)
        delattr(module, tensor_name)
        if not is_parametrized(module):
            _inject_new_class(module)
            module.parametrizations = ModuleDict()
        _inject_property(module, tensor_name)
        module.parametrizations[tensor_name] = plist
    else:
        raise ValueError(f"Module '{module}' does not have a parameter, a buffer, or a "
                         f"parametrized element with name '{tensor_name}'")
    return module


def is_parametrized(module, tensor_name=None):
    """Whether ``module`` has a parametrization (on ``tensor_name``, if given)."""
    plists = module.__dict__.get("_modules", {}).get("parametrizations")
    if not isinstance(plists, ModuleDict):
        return False
    return len(plists) > 0 if tensor_name is None else tensor_name in plists


def remove_parametrizations(module, tensor_name, leave_parametrized=True):
    """Undo :func:`register_parametrization` on ``tensor_name``: it becomes a plain parameter
    (or buffer) again, holding the parametrized value or, with ``leave_parametrized=False``,
    the original.

    Example:
        >>> import ember
        >>> from ember.nn.utils import parametrize, parametrizations
        >>> m = parametrizations.weight_norm(ember.nn.Linear(3, 2))
        >>> m = parametrize.remove_parametrizations(m, "weight")
        >>> type(m).__name__, list(m.state_dict())
        ('Linear', ['bias', 'weight'])
    """
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"Module {module} does not have a parametrization on {tensor_name}")
    plist = module.parametrizations[tensor_name]
    if plist.is_tensor:
        original = plist.original
        if leave_parametrized:
            with no_grad():
                _set(original, getattr(module, tensor_name))
    elif leave_parametrized:
        t = getattr(module, tensor_name)
        original = Parameter(t.detach()) if t.requires_grad else t
    else:
        raise ValueError("Cannot leave unparametrized (`leave_parametrized=False`) a tensor "
                         "that is parametrized in terms of a sequence of tensors.")
    delattr(module.__class__, tensor_name)
    del module.parametrizations[tensor_name]
    _register_parameter_or_buffer(module, tensor_name, original)
    if not is_parametrized(module):
        delattr(module, "parametrizations")
        module.__class__ = module.__class__.__bases__[0]
    return module


def type_before_parametrizations(module):
    """The module's class as it was before any parametrization was registered."""
    return module.__class__.__bases__[0] if is_parametrized(module) else type(module)


def transfer_parametrizations_and_params(from_module, to_module, tensor_name=None):
    """Register ``from_module``'s parametrizations (and their originals) on ``to_module``."""
    if not is_parametrized(from_module):
        return to_module
    names = list(from_module.parametrizations) if tensor_name is None else [tensor_name]
    for name in names:
        if not hasattr(to_module, name):
            setattr(to_module, name, Parameter(getattr(from_module, name).detach()))
        for p in from_module.parametrizations[name]:
            register_parametrization(to_module, name, p)
        src, dst = from_module.parametrizations[name], to_module.parametrizations[name]
        with no_grad():
            if src.is_tensor:
                dst.original.copy_(src.original)
            else:
                for i in range(src.ntensors):
                    getattr(dst, f"original{i}").copy_(getattr(src, f"original{i}"))
    return to_module

