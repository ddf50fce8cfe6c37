"""Utilities with torch.utils' names; ``ember.utils.data`` holds datasets and the DataLoader."""
from . import data  # noqa: F401


def __getattr__(name):
    # checkpoint loads amp and autograd.Function, benchmark timeit: only on first use
    if name in ("checkpoint", "benchmark"):
        import importlib
        mod = importlib.import_module(".checkpoint", __name__)
        globals()[name] = mod
        return mod
    raise AttributeError(f"module 'ember.utils' has no attribute '{name}'")
