"""``torch.utils.benchmark``: time statements with :class:`Timer`, read :class:`Measurement`s,
print many side by side with :class:`Compare`.

Example:
    >>> import ember
    >>> from ember.utils.benchmark import Timer
    >>> m = Timer("a @ a", globals={"a": ember.ones(16, 16)}).blocked_autorange(min_run_time=0.01)
    >>> m.median > 0
    True
"""
from ._callgrind import CallgrindStats, CopyIfCallgrind, FunctionCount, FunctionCounts  # noqa
from ._compare import Colorize, Compare  # noqa: F401
from ._fuzzer import (FuzzedParameter, FuzzedSparseTensor, FuzzedTensor, Fuzzer,  # noqa: F401
                      ParameterAlias)
from ._timer import (Language, Measurement, TaskSpec, Timer, ordered_unique,  # noqa: F401
                     select_unit, set_torch_threads, timer, trim_sigfig, unit_to_english)

__all__ = ["Colorize", "Compare", "Language", "Measurement", "TaskSpec", "Timer", "timer",
           "CallgrindStats", "CopyIfCallgrind", "FunctionCount", "FunctionCounts",
           "FuzzedParameter", "FuzzedSparseTensor", "FuzzedTensor", "Fuzzer", "ParameterAlias",
           "ordered_unique", "set_torch_threads", "trim_sigfig", "unit_to_english"]
