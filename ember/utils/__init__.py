"""Utilities with torch.utils' names; ``ember.utils.data`` holds datasets and the DataLoader."""
from . import data  # noqa: F401


def swap_tensors(t1, t2):
    """Swap everything two tensors are (data, autograd state, class, attributes) in place, so
    that every reference to ``t1`` now sees ``t2``'s tensor and the other way round, as
    ``torch.utils.swap_tensors``. Refused, as torch: a weak reference to either, different
    slots, a tensor a view or a graph holds (torch's ``use_count``); a leaf's gradient
    accumulator that a graph made before reaches raises on that graph's backward.

    Example:
        >>> import ember
        >>> a, b = ember.zeros(2), ember.nn.Parameter(ember.ones(3))
        >>> ember.utils.swap_tensors(a, b)
        >>> a
        Parameter containing:
        tensor([1., 1., 1.], requires_grad=True)
        >>> b
        tensor([0., 0.])
    """
    import weakref

    for name, t in (("t1", t1), ("t2", t2)):
        acc = getattr(t, "_grad_acc", None)     # (a leaf's accumulator refers to it weakly)
        if [r for r in weakref.getweakrefs(t) if acc is None or r is not acc._variable]:
            raise RuntimeError(f"Cannot swap {name} because it has weakref associated with it")
    slots1, slots2 = _slots(type(t1)), _slots(type(t2))
    if slots1 != slots2:
        raise RuntimeError("Cannot swap t1 and t2 if they have different slots")
    _check_use_counts(t1, t2)
    for t in (t1, t2):
        acc = getattr(t, "_grad_acc", None)
        if acc is not None:     # a graph made before reaches this accumulator: poison it
            acc.register_prehook(_poisoned)
            t._grad_acc = t._leaf_edge = None       # (graphs made after get a fresh one)
    t1.__class__, t2.__class__ = t2.__class__, t1.__class__
    t1.__dict__, t2.__dict__ = t2.__dict__, t1.__dict__
    missing = object()
    for slot in slots1:         # ember's hot fields are slots of the C TensorBase
        v1, v2 = getattr(t1, slot, missing), getattr(t2, slot, missing)
        for t, v in ((t1, v2), (t2, v1)):
            if v is not missing:
                setattr(t, slot, v)
            elif hasattr(t, slot):
                delattr(t, slot)


def _check_use_counts(t1, t2):
    """torch's rule on the references its tensor implementation has besides the tensor: none,
    or a leaf's gradient accumulator alone. Here they are counted as views whose base is the
    tensor and graph nodes that saved it, found in one scan of the garbage collector's objects
    (~10 ms with 45k objects alive: swapping is rare)."""
    import gc

    from .._tensor import Tensor
    from ..autograd.graph import Node
    uses = {id(t): getattr(t, "_grad_acc", None) is not None for t in (t1, t2)}
    for r in gc.get_referrers(t1, t2):
        if isinstance(r, Tensor) and id(r._base) in uses:
            uses[id(r._base)] += 1
        elif type(r) is tuple and len(r) == 2 and id(r[0]) in uses and type(r[1]) is int:
            # (t, version): a saved tensor's entry in its node's ``versions`` list
            uses[id(r[0])] += any(type(v) is list and any(
                isinstance(o, Node) and o.versions is v for o in gc.get_referrers(v))
                for v in gc.get_referrers(r))
    for name, t in (("t1", t1), ("t2", t2)):
        n = uses[id(t)]
        if n == 1 and t.is_leaf and not t.requires_grad:
            raise RuntimeError("It is not possible to get the gradient edge for a Tensor that "
                               "does not require gradients")
        if n > 1 or n == 1 and (not t.is_leaf or t._grad_acc is None):
            raise RuntimeError(f"Expected use_count of {name} to be 1 or 2 with an "
                               f"AccumulateGrad node but got {n + 1} make sure you are not "
                               "holding references to the tensor in other places.")


def _slots(cls):
    import types
    return {name for klass in cls.__mro__ for name, v in vars(klass).items()
            if isinstance(v, types.MemberDescriptorType)}


def _poisoned(grad_outputs):
    raise RuntimeError("Trying to execute AccumulateGrad node that was poisoned by swap_tensors "
                       "this can happen when you try to run backward on a tensor that was "
                       "swapped. For a module m with `torch.__future__."
                       "set_swap_module_params_on_conversion(True)` you should not change the "
                       "device or dtype of the module (e.g. `m.cpu()` or `m.half()`) between "
                       "running forward and backward. To resolve this, please only change the "
                       "device/dtype before running forward (or after both forward and "
                       "backward).")


def __getattr__(name):
    # checkpoint loads amp and autograd.Function, benchmark timeit, tensorboard the tensorboard
    # package and protobuf: only on first use
    if name in ("checkpoint", "benchmark", "tensorboard", "dlpack", "hooks"):
        import importlib
        mod = importlib.import_module(f".{name}", __name__)
        globals()[name] = mod
        return mod
    raise AttributeError(f"module 'ember.utils' has no attribute '{name}'")
