"""``torch.utils.benchmark``: time statements with :class:`Timer`, read :class:`Measurement`s,
print many side by side with :class:`Compare`.

Example:
    >>> import ember
    >>> from ember.utils.benchmark import Timer
    >>> m = Timer("a @ a", globals={"a": ember.ones(16, 16)}).blocked_autorange(min_run_time=0.01)
    >>> m.median > 0
    True
"""
from ._compare import Colorize, Compare  # noqa: F401
from ._timer import Language, Measurement, TaskSpec, Timer, select_unit, timer  # noqa: F401

__all__ = ["Colorize", "Compare", "Language", "Measurement", "TaskSpec", "Timer", "timer"]
