"""``torch.utils.hooks``' ``RemovableHandle`` (every module and optimizer hook returns one) and
its helpers; ``ember.utils.hooks`` exports them. Kept here, light, for ``nn`` to import."""
import warnings
import weakref
from collections import OrderedDict


class RemovableHandle:
    """Removes hook ``id`` from ``hooks_dict`` (and from ``extra_dict``, a dict or a list of
    them) on ``remove()`` or on leaving a ``with`` block. Holds the dicts weakly; pickles with
    them.

    Example:
        >>> from ember.utils.hooks import RemovableHandle
        >>> from collections import OrderedDict
        >>> hooks = OrderedDict()
        >>> h = RemovableHandle(hooks)
        >>> hooks[h.id] = print
        >>> h.remove()
        >>> len(hooks)
        0
    """

    next_id = 0

    def __init__(self, hooks_dict, *, extra_dict=None):
        self.hooks_dict_ref = weakref.ref(hooks_dict)
        self.id = RemovableHandle.next_id
        RemovableHandle.next_id += 1
        extra = [extra_dict] if isinstance(extra_dict, dict) else extra_dict or ()
        self.extra_dict_ref = tuple(weakref.ref(d) for d in extra)

    def remove(self):
        for ref in (self.hooks_dict_ref,) + self.extra_dict_ref:
            d = ref()
            if d is not None:
                d.pop(self.id, None)

    def __getstate__(self):
        return (self.hooks_dict_ref(), self.id, tuple(r() for r in self.extra_dict_ref))

    def __setstate__(self, state):
        # a dict that is gone pickles as None: the handle then holds a dead reference
        def ref(d):
            return weakref.ref(OrderedDict() if d is None else d)
        self.hooks_dict_ref, self.id = ref(state[0]), state[1]
        RemovableHandle.next_id = max(RemovableHandle.next_id, self.id + 1)
        self.extra_dict_ref = tuple(map(ref, state[2] if len(state) > 2 and state[2] else ()))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def unserializable_hook(f):
    """Marks hook ``f`` as one ``warn_if_has_hooks`` need not warn about."""
    f.__torch_unserializable__ = True
    return f


def warn_if_has_hooks(tensor):
    """Warns for each backward hook on ``tensor`` (hooks are not saved with it) unless marked
    ``unserializable_hook``."""
    node = tensor.grad_fn
    table = node._tensor_pre_hooks if node is not None else tensor.__dict__.get("_leaf_hooks", {})
    nr = tensor._output_nr if node is not None else 0
    for hook in table.get(nr, []) if isinstance(table, dict) else []:
        if not hasattr(hook, "__torch_unserializable__"):
            warnings.warn(f"backward hook {hook!r} on tensor will not be serialized.  If this "
                          "is expected, you can decorate the function with "
                          "@torch.utils.hooks.unserializable_hook to suppress this warning",
                          stacklevel=2)
