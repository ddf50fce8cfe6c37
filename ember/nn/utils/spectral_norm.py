"""Legacy spectral normalization by a forward pre-hook (``torch.nn.utils.spectral_norm``):
``<name>_orig`` is the parameter, ``<name>_u`` / ``<name>_v`` the power-iteration buffers.
New code should use ``ember.nn.utils.parametrizations.spectral_norm``."""
import ember

from ...autograd.grad_mode import no_grad
from .. import functional as F
from ..parameter import Parameter
from .parametrizations import _normalized_randn, _transposed_conv, _weight_matrix
from .weight_norm import _remove_hook


class SpectralNorm:
    _version = 1

    def __init__(self, name="weight", n_power_iterations=1, dim=0, eps=1e-12):
        if n_power_iterations <= 0:
            raise ValueError("Expected n_power_iterations to be positive, but got "
                             f"n_power_iterations={n_power_iterations}")
        self.name, self.dim, self.n_power_iterations, self.eps = name, dim, n_power_iterations, eps

    def compute_weight(self, module, do_power_iteration):
        weight = getattr(module, self.name + "_orig")
        u, v = getattr(module, self.name + "_u"), getattr(module, self.name + "_v")
        mat = _weight_matrix(weight, self.dim)
        if do_power_iteration:
            # NOTE: the legacy hook updates v before u (the parametrization does u first).
            with no_grad():
                for _ in range(self.n_power_iterations):
                    v.copy_(F.normalize(ember.mv(mat.t(), u), dim=0, eps=self.eps))
                    u.copy_(F.normalize(ember.mv(mat, v), dim=0, eps=self.eps))
            u, v = u.clone(), v.clone()
        sigma = ember.dot(u, ember.mv(mat, v))
        return weight / sigma

    def remove(self, module):
        with no_grad():
            weight = self.compute_weight(module, do_power_iteration=False)
        delattr(module, self.name)
        for sfx in ("_u", "_v", "_orig"):
            delattr(module, self.name + sfx)
        module.register_parameter(self.name, Parameter(weight.detach()))

    def __call__(self, module, inputs):
        setattr(module, self.name, self.compute_weight(module, module.training))

    @staticmethod
    def apply(module, name, n_power_iterations, dim, eps):
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, SpectralNorm) and hook.name == name:
                raise RuntimeError("Cannot register two spectral_norm hooks on the same "
                                   f"parameter {name}")
        fn = SpectralNorm(name, n_power_iterations, dim, eps)
        weight = module._parameters[name]
        with no_grad():
            mat = _weight_matrix(weight, dim)
            h, w = mat.shape
            u, v = _normalized_randn(h, mat, eps), _normalized_randn(w, mat, eps)
        delattr(module, name)
        module.register_parameter(name + "_orig", weight)
        setattr(module, name, weight.detach())
        module.register_buffer(name + "_u", u)
        module.register_buffer(name + "_v", v)
        module.register_forward_pre_hook(fn)
        return fn


def spectral_norm(module, name="weight", n_power_iterations=1, eps=1e-12, dim=None):
    """Legacy spectral normalization: ``<name> = <name>_orig / sigma`` before each forward.

    Example:
        >>> import ember
        >>> m = ember.nn.utils.spectral_norm(ember.nn.Linear(20, 40))
        >>> list(m.state_dict())
        ['bias', 'weight_orig', 'weight_u', 'weight_v']
    """
    if dim is None:
        dim = 1 if _transposed_conv(module) else 0
    SpectralNorm.apply(module, name, n_power_iterations, dim, eps)
    return module


def remove_spectral_norm(module, name="weight"):
    """Undo :func:`spectral_norm`: ``<name>`` becomes a plain parameter again."""
    return _remove_hook(module, SpectralNorm, name, "spectral_norm")
