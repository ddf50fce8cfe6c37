"""Utilities with torch.utils' names; ``ember.utils.data`` holds datasets and the DataLoader."""
from . import data  # noqa: F401


def __getattr__(name):
    # checkpoint loads amp and autograd.Function, benchmark timeit, tensorboard the tensorboard
    # package and protobuf: only on first use
    if name in ("checkpoint", "benchmark", "tensorboard", "dlpack", "hooks"):
        import importlib
        mod = importlib.import_module(f".{name}", __name__)
        globals()[name] = mod
        return mod
    raise AttributeError(f"module 'ember.utils' has no attribute '{name}'")
