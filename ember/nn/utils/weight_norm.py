"""Legacy weight normalization by a forward pre-hook (``torch.nn.utils.weight_norm``): the
parameters are ``<name>_g`` and ``<name>_v`` and ``<name>`` is recomputed before each forward.
New code should use ``ember.nn.utils.parametrizations.weight_norm``."""
from ..parameter import Parameter
from .parametrizations import _norm_except_dim, _weight_norm


class WeightNorm:
    def __init__(self, name, dim):
        self.name, self.dim = name, (-1 if dim is None else dim)

    def compute_weight(self, module):
        g, v = getattr(module, self.name + "_g"), getattr(module, self.name + "_v")
        return _weight_norm(v, g, self.dim)

    @staticmethod
    def apply(module, name, dim):
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, WeightNorm) and hook.name == name:
                raise RuntimeError("Cannot register two weight_norm hooks on the same "
                                   f"parameter {name}")
        fn = WeightNorm(name, dim)
        weight = getattr(module, name)
        del module._parameters[name]
        module.register_parameter(name + "_g",
                                  Parameter(_norm_except_dim(weight, 2, fn.dim).detach()))
        module.register_parameter(name + "_v", Parameter(weight.detach()))
        setattr(module, name, fn.compute_weight(module))
        module.register_forward_pre_hook(fn)
        return fn

    def remove(self, module):
        weight = self.compute_weight(module)
        delattr(module, self.name)
        del module._parameters[self.name + "_g"]
        del module._parameters[self.name + "_v"]
        setattr(module, self.name, Parameter(weight.detach()))

    def __call__(self, module, inputs):
        setattr(module, self.name, self.compute_weight(module))


def _remove_hook(module, kind, name, what):
    for k, hook in module._forward_pre_hooks.items():
        if isinstance(hook, kind) and hook.name == name:
            hook.remove(module)
            del module._forward_pre_hooks[k]
            return module
    raise ValueError(f"{what} of '{name}' not found in {module}")


def weight_norm(module, name="weight", dim=0):
    """Legacy weight normalization: ``<name> = g * v / ||v||`` recomputed before each forward.

    Example:
        >>> import ember
        >>> m = ember.nn.utils.weight_norm(ember.nn.Linear(20, 40), name="weight")
        >>> m.weight_g.shape, m.weight_v.shape
        (torch.Size([40, 1]), torch.Size([40, 20]))
    """
    WeightNorm.apply(module, name, dim)
    return module


def remove_weight_norm(module, name="weight"):
    """Undo :func:`weight_norm`: ``<name>`` becomes a plain parameter again."""
    return _remove_hook(module, WeightNorm, name, "weight_norm")
