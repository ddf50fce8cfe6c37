"""``ember.nn``: modules, parameters, functional and init, as ``torch.nn``."""
from . import functional, init, utils  # noqa: F401
from .modules import *  # noqa: F401,F403
from .modules import Module  # noqa: F401
from .parameter import (Buffer, Parameter, UninitializedBuffer,  # noqa: F401
                        UninitializedParameter)


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
