"""``ember.signal``: signal-processing helpers, as ``torch.signal`` (window functions)."""
from . import windows  # noqa: F401
