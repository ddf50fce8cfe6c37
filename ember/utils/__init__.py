"""Utilities with torch.utils' names; ``ember.utils.data`` holds datasets and the DataLoader."""
from . import data  # noqa: F401
