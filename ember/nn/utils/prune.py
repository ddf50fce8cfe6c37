"""``ember.nn.utils.prune``: pruning a module's parameter by a mask, as
``torch.nn.utils.prune``.

Pruning ``name`` moves the parameter to ``name + "_orig"``, adds the buffer ``name + "_mask"``
and makes ``name`` the plain attribute ``orig * mask``, recomputed before each forward by the
pruning method itself, a forward pre-hook. Pruning the same parameter again combines the
methods in a ``PruningContainer`` (a new mask acts on what the old one kept); ``remove`` makes
the pruning permanent. ``random_*`` draw from ember's generator, so their masks are torch's in
distribution, not bit for bit.
"""
import numbers
from abc import ABC, abstractmethod
from collections.abc import Iterable

import ember

__all__ = ["BasePruningMethod", "PruningContainer", "Identity", "RandomUnstructured",
           "L1Unstructured", "RandomStructured", "LnStructured", "CustomFromMask", "identity",
           "random_unstructured", "l1_unstructured", "random_structured", "ln_structured",
           "global_unstructured", "custom_from_mask", "remove", "is_pruned"]


class BasePruningMethod(ABC):
    """A way to compute a pruning mask; subclasses define ``compute_mask(t, default_mask)``
    and ``PRUNING_TYPE`` (``"unstructured"``, ``"structured"`` with a ``dim``, or
    ``"global"``).

    Example:
        >>> import ember
        >>> from ember.nn.utils import prune
        >>> class Negative(prune.BasePruningMethod):
        ...     PRUNING_TYPE = "unstructured"
        ...     def compute_mask(self, t, default_mask):
        ...         return default_mask * (t >= 0)
        >>> m = ember.nn.Linear(2, 1)
        >>> with ember.no_grad():
        ...     _ = m.weight.copy_(ember.tensor([[1.0, -2.0]]))
        >>> _ = Negative.apply(m, "weight")
        >>> m.weight
        tensor([[1., -0.]], grad_fn=<MulBackward0>)
    """
    _tensor_name = None

    def __call__(self, module, inputs):
        setattr(module, self._tensor_name, self.apply_mask(module))

    @abstractmethod
    def compute_mask(self, t, default_mask):
        """The new mask for ``t`` given the mask already on it."""

    def apply_mask(self, module):
        """The pruned tensor: the module's ``<name>_orig`` times ``<name>_mask``."""
        if self._tensor_name is None:
            raise AssertionError(f"Module {module} has to be pruned")
        orig = getattr(module, self._tensor_name + "_orig")
        return getattr(module, self._tensor_name + "_mask").to(dtype=orig.dtype) * orig

    @classmethod
    def apply(cls, module, name, *args, importance_scores=None, **kwargs):
        """Prune ``module.<name>`` with a new ``cls(*args, **kwargs)`` (combined with the
        methods already on it), ranking entries by ``importance_scores`` (default: the
        parameter itself); returns the method (or container) now on the module."""
        old, keys = None, [k for k, h in module._forward_pre_hooks.items()
                           if isinstance(h, BasePruningMethod) and h._tensor_name == name]
        if len(keys) > 1:
            raise AssertionError(f"Avoid adding multiple pruning hooks to the same tensor {name} "
                                 f"of module {module}. Use a PruningContainer.")
        for k in keys:
            old = module._forward_pre_hooks.pop(k)
        method = _named(cls(*args, **kwargs), name)
        if old is not None:
            container = old if isinstance(old, PruningContainer) else PruningContainer(old)
            container.add_pruning_method(method)
            method = container
        orig = getattr(module, name)
        if importance_scores is not None and importance_scores.shape != orig.shape:
            raise AssertionError(f"importance_scores should have the same shape as parameter "
                                 f"{name} of {module}, got {importance_scores.shape} vs "
                                 f"{orig.shape}")
        scores = orig if importance_scores is None else importance_scores
        fresh = not isinstance(method, PruningContainer)
        if fresh:
            module.register_parameter(name + "_orig", orig)
            del module._parameters[name]
            default_mask = ember.ones_like(orig)
        else:
            default_mask = getattr(module, name + "_mask").detach().clone(
                memory_format=ember.contiguous_format)
        try:
            module.register_buffer(name + "_mask", method.compute_mask(
                scores, default_mask=default_mask))
            setattr(module, name, method.apply_mask(module))
            module.register_forward_pre_hook(method)
        except Exception:
            if fresh:
                module.register_parameter(name, getattr(module, name + "_orig"))
                del module._parameters[name + "_orig"]
            raise
        return method

    def prune(self, t, default_mask=None, importance_scores=None):
        """``t`` times this method's mask (computed from ``importance_scores``, default
        ``t``), without touching any module."""
        if importance_scores is not None and importance_scores.shape != t.shape:
            raise AssertionError(f"importance_scores should have the same shape as tensor t, got "
                                 f"{importance_scores.shape} vs {t.shape}")
        scores = t if importance_scores is None else importance_scores
        return t * self.compute_mask(scores, default_mask=ember.ones_like(t) if
                                     default_mask is None else default_mask)

    def remove(self, module):
        """Make the pruning permanent: ``<name>`` becomes a parameter again holding the pruned
        values; ``_orig``, ``_mask`` go (the hook is the caller's to drop: see :func:`remove`)."""
        if self._tensor_name is None:
            raise AssertionError(f"Module {module} has to be pruned before pruning can be removed")
        weight = self.apply_mask(module)
        if hasattr(module, self._tensor_name):
            delattr(module, self._tensor_name)
        orig = module._parameters[self._tensor_name + "_orig"]
        orig.data = weight.data
        del module._parameters[self._tensor_name + "_orig"]
        del module._buffers[self._tensor_name + "_mask"]
        setattr(module, self._tensor_name, orig)


def _named(method, name):
    method._tensor_name = name
    return method


class PruningContainer(BasePruningMethod):
    """The pruning methods applied in turn to one parameter: the last one's mask acts on the
    entries (or, structured, the channels) the earlier masks kept.

    Example:
        >>> import ember
        >>> from ember.nn.utils import prune
        >>> m = ember.nn.Linear(4, 2)
        >>> _ = prune.l1_unstructured(m, "weight", amount=2)
        >>> _ = prune.l1_unstructured(m, "weight", amount=2)
        >>> [type(p).__name__ for p in m._forward_pre_hooks.values()]
        ['PruningContainer']
        >>> int(m.weight_mask.sum())
        4
    """

    def __init__(self, *args):
        self._pruning_methods = ()
        if len(args) == 1:
            self._tensor_name = args[0]._tensor_name
        for method in args:
            self.add_pruning_method(method)

    def add_pruning_method(self, method):
        """Append ``method`` (acting on the same parameter)."""
        if not isinstance(method, BasePruningMethod) and method is not None:
            raise TypeError(f"{type(method)} is not a BasePruningMethod subclass")
        if method is not None and self._tensor_name != method._tensor_name:
            raise ValueError("Can only add pruning methods acting on the parameter named "
                             f"'{self._tensor_name}' to PruningContainer {self}. Found "
                             f"'{method._tensor_name}'")
        self._pruning_methods += (method,)

    def __len__(self):
        return len(self._pruning_methods)

    def __iter__(self):
        return iter(self._pruning_methods)

    def __getitem__(self, idx):
        return self._pruning_methods[idx]

    def compute_mask(self, t, default_mask):
        """The last method's mask computed on what ``default_mask`` kept."""
        method, mask = self._pruning_methods[-1], default_mask
        new_mask = mask.to(dtype=t.dtype)
        if method.PRUNING_TYPE == "unstructured":
            slc = mask == 1
        elif method.PRUNING_TYPE == "structured":
            if not hasattr(method, "dim"):
                raise AttributeError('Pruning methods of PRUNING_TYPE "structured" need to have '
                                     "the attribute `dim` defined.")
            n, dim = t.dim(), method.dim
            dim = dim + n if dim < 0 else dim
            if dim < 0:
                raise IndexError(f"Index is out of bounds for tensor with dimensions {n}")
            slc = [slice(None)] * n
            slc[dim] = mask.sum(dim=[d for d in range(n) if d != dim]) != 0
            slc = tuple(slc)
        elif method.PRUNING_TYPE == "global":
            slc = (slice(None),) * t.dim()
        else:
            raise ValueError(f"Unrecognized PRUNING_TYPE {method.PRUNING_TYPE}")
        new_mask[slc] = method.compute_mask(t[slc], default_mask=mask[slc]).to(new_mask.dtype)
        return new_mask


class Identity(BasePruningMethod):
    """Prunes nothing: the mask is all ones (the reparametrization alone).

    Example:
        >>> import ember
        >>> from ember.nn.utils import prune
        >>> m = prune.identity(ember.nn.Linear(3, 2), "bias")
        >>> m.bias_mask
        tensor([1., 1.])
    """
    PRUNING_TYPE = "unstructured"

    def compute_mask(self, t, default_mask):
        return default_mask

    @classmethod
    def apply(cls, module, name):
        return super().apply(module, name)


def _amount_init(amount):
    if not isinstance(amount, numbers.Real):
        raise TypeError(f"Invalid type for amount: {amount}. Must be int or float.")
    if (isinstance(amount, numbers.Integral) and amount < 0) or (
            not isinstance(amount, numbers.Integral) and not 0.0 <= float(amount) <= 1.0):
        raise ValueError(f"amount={amount} should either be a float in the range [0, 1] or a "
                         "non-negative integer")
    return amount


def _how_many(amount, size):
    """How many of ``size`` entries/channels to prune (an int amount as is, a fraction
    rounded), checked against ``size``."""
    n = amount if isinstance(amount, numbers.Integral) else round(amount * size)
    if isinstance(amount, numbers.Integral) and amount > size:
        raise ValueError(f"amount={amount} should be smaller than the number of parameters to "
                         f"prune={size}")
    return n


def _structured(t, dim):
    if t.dim() <= 1:
        raise ValueError("Structured pruning can only be applied to multidimensional tensors. "
                         f"Found tensor of shape {t.shape} with {t.dim()} dims")
    if dim >= t.dim():
        raise IndexError(f"Invalid index {dim} for tensor of size {t.shape}")


def _channel_mask(t, dim, keep, default_mask):
    mask = ember.zeros_like(t)
    slc = [slice(None)] * t.dim()
    slc[dim] = keep
    mask[tuple(slc)] = 1
    return mask * default_mask.to(dtype=mask.dtype)


class _Unstructured(BasePruningMethod):
    """Prunes ``amount`` entries (an int, or a fraction): those ``_pruned(t, k)`` picks."""
    PRUNING_TYPE = "unstructured"

    def __init__(self, amount):
        self.amount = _amount_init(amount)

    def compute_mask(self, t, default_mask):
        k = _how_many(self.amount, t.nelement())
        mask = default_mask.clone(memory_format=ember.contiguous_format)
        if k:
            mask.view(-1)[self._pruned(t, k)] = 0
        return mask


class RandomUnstructured(_Unstructured):
    """Prunes ``amount`` (an int, or a fraction) of the entries still kept, chosen at random.

    Example:
        >>> import ember
        >>> from ember.nn.utils import prune
        >>> m = prune.random_unstructured(ember.nn.Linear(4, 5), "weight", amount=0.25)
        >>> int((m.weight_mask == 0).sum())
        5
    """

    @staticmethod
    def _pruned(t, k):
        return ember.topk(ember.rand_like(t).view(-1), k=k).indices

    @classmethod
    def apply(cls, module, name, amount):
        return super().apply(module, name, amount=amount)


class L1Unstructured(_Unstructured):
    """Prunes the ``amount`` entries (an int, or a fraction) of smallest absolute value.

    Example:
        >>> import ember
        >>> from ember.nn.utils import prune
        >>> m = ember.nn.Linear(3, 1, bias=False)
        >>> with ember.no_grad():
        ...     _ = m.weight.copy_(ember.tensor([[0.5, -3.0, 0.1]]))
        >>> prune.l1_unstructured(m, "weight", amount=2).weight
        tensor([[ 0., -3.,  0.]], grad_fn=<MulBackward0>)
    """

    @staticmethod
    def _pruned(t, k):
        return ember.topk(t.abs().view(-1), k=k, largest=False).indices

    @classmethod
    def apply(cls, module, name, amount, importance_scores=None):
        return super().apply(module, name, amount=amount, importance_scores=importance_scores)


class RandomStructured(BasePruningMethod):
    """Prunes ``amount`` channels along ``dim`` (an int, or a fraction), chosen at random.

    Example:
        >>> import ember
        >>> from ember.nn.utils import prune
        >>> m = prune.random_structured(ember.nn.Linear(3, 4), "weight", amount=2, dim=0)
        >>> m.weight_mask.sum(1).tolist().count(0.0)
        2
    """
    PRUNING_TYPE = "structured"

    def __init__(self, amount, dim=-1):
        self.amount, self.dim = _amount_init(amount), dim

    def compute_mask(self, t, default_mask):
        _structured(t, self.dim)
        n = t.shape[self.dim]
        k = _how_many(self.amount, n)
        if not k:
            return default_mask
        prob = ember.rand(n)
        return _channel_mask(t, self.dim, prob > ember.kthvalue(prob, k=k).values, default_mask)

    @classmethod
    def apply(cls, module, name, amount, dim=-1):
        return super().apply(module, name, amount=amount, dim=dim)


class LnStructured(BasePruningMethod):
    """Prunes the ``amount`` channels along ``dim`` of smallest L``n`` norm (``n`` as
    ``torch.norm``'s ``p``).

    Example:
        >>> import ember
        >>> from ember.nn.utils import prune
        >>> m = ember.nn.Linear(2, 3, bias=False)
        >>> with ember.no_grad():
        ...     _ = m.weight.copy_(ember.tensor([[1.0, 1.0], [0.1, 0.2], [3.0, 0.0]]))
        >>> prune.ln_structured(m, "weight", amount=1, n=2, dim=0).weight_mask
        tensor([[1., 1.],
                [0., 0.],
                [1., 1.]])
    """
    PRUNING_TYPE = "structured"

    def __init__(self, amount, n, dim=-1):
        self.amount, self.n, self.dim = _amount_init(amount), n, dim

    def compute_mask(self, t, default_mask):
        _structured(t, self.dim)
        size = t.shape[self.dim]
        k = _how_many(self.amount, size)
        dim = self.dim % t.dim()
        norm = ember.norm(t, p=self.n, dim=[d for d in range(t.dim()) if d != dim])
        keep = ember.topk(norm, k=size - k, largest=True).indices
        return default_mask if not k else _channel_mask(t, self.dim, keep, default_mask)

    @classmethod
    def apply(cls, module, name, amount, n, dim, importance_scores=None):
        return super().apply(module, name, amount=amount, n=n, dim=dim,
                             importance_scores=importance_scores)


class CustomFromMask(BasePruningMethod):
    """Prunes by a given mask (of the parameter's shape).

    Example:
        >>> import ember
        >>> from ember.nn.utils import prune
        >>> m = prune.custom_from_mask(ember.nn.Linear(2, 2), "bias", ember.tensor([0, 1]))
        >>> m.bias_mask
        tensor([0., 1.])
    """
    PRUNING_TYPE = "global"

    def __init__(self, mask):
        self.mask = mask

    def compute_mask(self, t, default_mask):
        if default_mask.shape != self.mask.shape:
            raise AssertionError(f"default_mask shape {default_mask.shape} must match self.mask "
                                 f"shape {self.mask.shape}")
        return default_mask * self.mask.to(dtype=default_mask.dtype)

    @classmethod
    def apply(cls, module, name, mask):
        return super().apply(module, name, mask=mask)


def identity(module, name):
    """Reparametrize ``module.<name>`` with an all-ones mask; returns ``module`` (see
    :class:`Identity`)."""
    Identity.apply(module, name)
    return module


def random_unstructured(module, name, amount):
    """Prune ``amount`` random entries of ``module.<name>``; returns ``module`` (see
    :class:`RandomUnstructured`)."""
    RandomUnstructured.apply(module, name, amount)
    return module


def l1_unstructured(module, name, amount, importance_scores=None):
    """Prune the ``amount`` smallest-magnitude entries of ``module.<name>``; returns
    ``module`` (see :class:`L1Unstructured`)."""
    L1Unstructured.apply(module, name, amount=amount, importance_scores=importance_scores)
    return module


def random_structured(module, name, amount, dim):
    """Prune ``amount`` random channels along ``dim``; returns ``module`` (see
    :class:`RandomStructured`)."""
    RandomStructured.apply(module, name, amount, dim)
    return module


def ln_structured(module, name, amount, n, dim, importance_scores=None):
    """Prune the ``amount`` channels along ``dim`` of smallest L``n`` norm; returns
    ``module`` (see :class:`LnStructured`)."""
    LnStructured.apply(module, name, amount, n, dim, importance_scores=importance_scores)
    return module


def global_unstructured(parameters, pruning_method, importance_scores=None, **kwargs):
    """Prune the ``(module, name)`` pairs of ``parameters`` together: ``pruning_method``
    (an unstructured method class, with ``kwargs``) ranks all their entries at once.

    Example:
        >>> import ember
        >>> from ember.nn.utils import prune
        >>> a, b = ember.nn.Linear(4, 4), ember.nn.Linear(4, 2)
        >>> prune.global_unstructured([(a, "weight"), (b, "weight")],
        ...                           pruning_method=prune.L1Unstructured, amount=0.5)
        >>> int((a.weight == 0).sum() + (b.weight == 0).sum())
        12
    """
    if not isinstance(parameters, Iterable):
        raise TypeError("global_unstructured(): parameters is not an Iterable")
    importance_scores = {} if importance_scores is None else importance_scores
    if not isinstance(importance_scores, dict):
        raise TypeError("global_unstructured(): importance_scores must be of type dict")
    parameters = list(parameters)
    from .convert_parameters import parameters_to_vector
    scores = parameters_to_vector([importance_scores.get((m, n), getattr(m, n))
                                   for m, n in parameters])
    default_mask = parameters_to_vector([getattr(m, n + "_mask", ember.ones_like(getattr(m, n)))
                                         for m, n in parameters])
    container = _named(PruningContainer(), "temp")
    method = _named(pruning_method(**kwargs), "temp")
    if method.PRUNING_TYPE != "unstructured":
        raise TypeError('Only "unstructured" PRUNING_TYPE supported for the `pruning_method`. '
                        f"Found method {pruning_method} of type {method.PRUNING_TYPE}")
    container.add_pruning_method(method)
    final = container.compute_mask(scores, default_mask)
    at = 0
    for m, n in parameters:
        p = getattr(m, n)
        custom_from_mask(m, n, mask=final[at:at + p.numel()].view_as(p))
        at += p.numel()


def custom_from_mask(module, name, mask):
    """Prune ``module.<name>`` by ``mask``; returns ``module`` (see :class:`CustomFromMask`)."""
    CustomFromMask.apply(module, name, mask)
    return module


def remove(module, name):
    """Make the pruning of ``module.<name>`` permanent and drop its hook; returns ``module``.

    Example:
        >>> import ember
        >>> from ember.nn.utils import prune
        >>> m = prune.remove(prune.l1_unstructured(ember.nn.Linear(2, 2), "weight", 1), "weight")
        >>> sorted(n for n, _ in m.named_parameters()), prune.is_pruned(m)
        (['bias', 'weight'], False)
    """
    for k, hook in module._forward_pre_hooks.items():
        if isinstance(hook, BasePruningMethod) and hook._tensor_name == name:
            hook.remove(module)
            del module._forward_pre_hooks[k]
            return module
    raise ValueError(f"Parameter '{name}' of module {module} has to be pruned before pruning "
                     "can be removed")


def is_pruned(module):
    """Whether ``module`` or any submodule carries a pruning hook.

    Example:
        >>> import ember
        >>> from ember.nn.utils import prune
        >>> m = ember.nn.Sequential(ember.nn.Linear(2, 2))
        >>> prune.is_pruned(m), prune.is_pruned(prune.identity(m[0], "weight"))
        (False, True)
    """
    return any(isinstance(h, BasePruningMethod) for _, sub in module.named_modules()
               for h in sub._forward_pre_hooks.values())
