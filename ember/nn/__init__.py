"""``ember.nn``: modules, parameters, functional and init, as ``torch.nn``."""
from . import functional, init, utils  # noqa: F401
from .modules import *  # noqa: F401,F403
from .modules import Module  # noqa: F401
from .parameter import (Buffer, Parameter, UninitializedBuffer,  # noqa: F401
                        UninitializedParameter)


def factory_kwargs(kwargs):
    """The factory arguments (``device``, ``dtype``, ``memory_format``) of ``kwargs``, merged
    with its ``factory_kwargs`` dict; TypeError for other keys or a key given twice.

    Example:
        >>> import ember
        >>> ember.nn.factory_kwargs({"device": "cpu", "factory_kwargs": {"dtype": ember.int8}})
        {'dtype': torch.int8, 'device': 'cpu'}
    """
    if kwargs is None:
        return {}
    simple = {"device", "dtype", "memory_format"}
    if not kwargs.keys() <= simple | {"factory_kwargs"}:
        raise TypeError(f"unexpected kwargs {kwargs.keys() - simple - {'factory_kwargs'}}")
    r = dict(kwargs.get("factory_kwargs", {}))
    for k in simple & kwargs.keys():
        if k in r:
            raise TypeError(f"{k} specified twice, in **kwargs and in factory_kwargs")
        r[k] = kwargs[k]
    return r


def __getattr__(name):
    # nn.parallel pulls in ember.distributed: loaded on first use only
    if name in ("parallel", "DataParallel"):
        # (import_module, not `from . import parallel`: that asks this __getattr__ again)
        import importlib
        parallel = importlib.import_module(".parallel", __name__)
        return parallel if name == "parallel" else parallel.DataParallel
    if name == "attention":
        import importlib
        return importlib.import_module(".attention", __name__)
    raise AttributeError(f"module 'ember.nn' has no attribute '{name}'")
