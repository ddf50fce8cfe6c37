"""``Timer`` and ``Measurement`` with torch.utils.benchmark's names, defaults and printout.

A Timer is ``timeit.Timer`` plus a thread count (set for the run, restored after) and labels;
its results are ``Measurement``s that know their median, IQR and spread.
"""
import contextlib
import dataclasses
import enum
import math
import textwrap
import timeit

import numpy as np

from ._callgrind import CopyIfCallgrind

_MAX_SIGNIFICANT_FIGURES = 4
_MIN_CONFIDENCE_INTERVAL = 25e-9            # 25 ns
_IQR_WARN_THRESHOLD, _IQR_GROSS_WARN_THRESHOLD = 0.1, 0.25


class Language(enum.Enum):
    PYTHON = 0
    CPP = 1


def timer():
    """The clock a Timer reads (``timeit.default_timer``: perf_counter)."""
    return timeit.default_timer()


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """What was timed (everything but the globals): the key Compare groups by."""
    stmt: str
    setup: str
    global_setup: str = ""
    label: str = None
    sub_label: str = None
    description: str = None
    env: str = None
    num_threads: int = 1

    @property
    def title(self):
        """The label (or statement) and sub-label, for printouts."""
        sub = f": {self.sub_label}" if self.sub_label else ""
        if self.label is not None:
            return self.label + sub
        if "\n" not in self.stmt:
            return self.stmt + sub
        return (f"stmt:{f' ({self.sub_label})' if self.sub_label else ''}\n"
                f"{textwrap.indent(self.stmt, '  ')}")

    def setup_str(self):
        if self.setup in ("pass", ""):
            return ""
        if "\n" in self.setup:
            return f"setup:\n{textwrap.indent(self.setup, '  ')}"
        return f"setup: {self.setup}"

    def summarize(self):
        sections = [self.title, self.description or "", self.setup_str()]
        return "\n".join(f"{s}\n" if "\n" in s else s for s in sections if s)


def select_unit(t):
    """(unit, seconds per unit) that prints ``t`` seconds with O(1) magnitude."""
    unit = {-3: "ns", -2: "us", -1: "ms"}.get(int(math.log10(t) // 3) if t > 0 else -3, "s")
    return unit, {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[unit]


def trim_sigfig(x, n):
    """``x`` rounded to ``n`` significant figures. NOTE: in float32 with halves to even, as
    torch's (which rounds a float32 tensor), so the digits Compare prints are torch's.

    Example:
        >>> from ember.utils.benchmark import trim_sigfig
        >>> trim_sigfig(3.14159, 2), trim_sigfig(123456, 3)
        (3.1000001430511475, 123000.0)
    """
    if n != int(n):
        raise AssertionError("Number of significant figures must be an integer")
    scale = 10 ** (int(np.ceil(np.log10(np.abs(np.float32(x))))) - n)
    return float(np.round(np.float32(x / scale)) * np.float32(scale))


def unit_to_english(u):
    """The word for a time unit: ``"us"`` -> ``"microsecond"``."""
    return {"ns": "nanosecond", "us": "microsecond", "ms": "millisecond", "s": "second"}[u]


def ordered_unique(elements):
    """The distinct elements in the order they first appear.

    Example:
        >>> from ember.utils.benchmark import ordered_unique
        >>> ordered_unique([3, 1, 3, 2, 1])
        [3, 1, 2]
    """
    return list(dict.fromkeys(elements))


@contextlib.contextmanager
def set_torch_threads(n):
    """Run the block with ``n`` intra-op threads (``ember.set_num_threads``), then restore
    the count."""
    from ... import _config
    prior = _config.get_num_threads()
    try:
        _config.set_num_threads(n)
        yield
    finally:
        _config.set_num_threads(prior)


@dataclasses.dataclass(repr=False)
class Measurement:
    """The times of one statement: ``raw_times`` are seconds per block of
    ``number_per_run`` executions; ``times`` per execution.

    Example:
        >>> from ember.utils.benchmark import Measurement, TaskSpec
        >>> m = Measurement(10, [1e-5, 2e-5, 3e-5], TaskSpec("x + 1", "pass"))
        >>> round(m.median * 1e6, 3), round(m.mean * 1e6, 3)
        (2.0, 2.0)
    """
    number_per_run: int
    raw_times: list
    task_spec: TaskSpec
    metadata: dict = None

    def __getattr__(self, name):
        # label, sub_label, stmt, num_threads... come from the task spec, as in torch
        if name in _TASKSPEC_FIELDS:
            return getattr(self.task_spec, name)
        raise AttributeError(f"'Measurement' object has no attribute '{name}'")

    times = property(lambda self: [t / self.number_per_run for t in self.raw_times])

    def _q(self, q):
        return float(np.quantile(np.asarray(self.times, dtype=np.float64), q))

    median = property(lambda self: self._q(0.5))
    mean = property(lambda self: float(np.mean(self.times)))
    iqr = property(lambda self: self._q(0.75) - self._q(0.25))
    title = property(lambda self: self.task_spec.title)
    env = property(lambda self: self.task_spec.env or "Unspecified env")
    as_row_name = property(lambda self: self.sub_label or self.stmt or "[Unknown]")

    @property
    def significant_figures(self):
        """Digits the spread of the middle half of the times supports (1 to 4)."""
        t = sorted(self.times)
        mid = t[len(t) // 4:math.ceil(3 * len(t) / 4)]
        ci = max(1.645 * float(np.std(mid)) / math.sqrt(len(mid)), _MIN_CONFIDENCE_INTERVAL)
        return min(max(int(math.floor(math.log10(self.median / ci))), 1), _MAX_SIGNIFICANT_FIGURES)

    def meets_confidence(self, threshold=_IQR_WARN_THRESHOLD):
        return self.iqr / self.median < threshold

    @property
    def _warnings(self):
        if len(self.times) < 4 or self.meets_confidence(_IQR_WARN_THRESHOLD):
            return ()
        why = ("This suggests significant environmental influence."
               if not self.meets_confidence(_IQR_GROSS_WARN_THRESHOLD)
               else "This could indicate system fluctuation.")
        return (f"  WARNING: Interquartile range is {self.iqr / self.median * 100:.1f}% of the "
                f"median measurement.\n           {why}",)

    has_warnings = property(lambda self: bool(self._warnings))

    def __repr__(self):
        n, med = len(self.times), self.median
        unit, scale = select_unit(med)
        lines = [f"<{type(self).__module__}.Measurement object at {hex(id(self))}>",
                 self.task_spec.summarize(),
                 f"  {'Median: ' if n > 1 else ''}{med / scale:.2f} {unit}"]
        if n >= 4:
            lines.append(f"  IQR:    {self.iqr / scale:.2f} {unit} ({self._q(0.25) / scale:.2f} "
                         f"to {self._q(0.75) / scale:.2f})")
        threads = self.num_threads
        lines.append(f"  {n} measurement{'s' if n > 1 else ''}, {self.number_per_run} runs "
                     f"{'per measurement,' if n > 1 else ','} {threads} "
                     f"thread{'s' if threads > 1 else ''}")
        lines.extend(self._warnings)
        return "\n".join(lines)

    @staticmethod
    def merge(measurements):
        """Replicates of one task spec pooled into one Measurement (per execution times)."""
        groups = {}
        for m in measurements:
            groups.setdefault(m.task_spec, []).extend(m.times)
        return [Measurement(1, times, spec) for spec, times in groups.items()]


_TASKSPEC_FIELDS = tuple(f.name for f in dataclasses.fields(TaskSpec))


class _Threads:
    """Run a block with ember's intra-op thread count set, then restore it."""

    def __init__(self, n):
        self.n = n

    def __enter__(self):
        from ... import _config
        self.prev = _config.get_num_threads()
        if self.n != self.prev:
            _config.set_num_threads(self.n)

    def __exit__(self, *exc):
        if self.n != self.prev:
            from ... import _config
            _config.set_num_threads(self.prev)


class Timer:
    """Time a statement (a string of code, or a callable) like ``timeit``, the way
    ``torch.utils.benchmark.Timer`` does: with a thread count and labels for ``Compare``.

    Args:
        stmt (str or callable): what to time. Default: "pass".
        setup (str or callable): run once before timing. Default: "pass".
        globals (dict): names ``stmt`` and ``setup`` see (``torch`` is ember unless given).
        num_threads (int): intra-op threads while timing. Default: 1.
        label, sub_label, description, env (str): how Compare groups and names it.

    Example:
        >>> import ember
        >>> from ember.utils.benchmark import Timer
        >>> t = Timer("x + 1", globals={"x": ember.ones(4)}, label="add")
        >>> m = t.timeit(100)
        >>> m.number_per_run, len(m.times), m.label
        (100, 1, 'add')
    """

    def __init__(self, stmt="pass", setup="pass", global_setup="", timer=timer, globals=None,
                 label=None, sub_label=None, description=None, env=None, num_threads=1,
                 language=Language.PYTHON):
        if language not in (Language.PYTHON, "py", "python"):
            raise ValueError(f"Timer: only Python statements are supported, got language "
                             f"{language!r}")
        if global_setup:
            raise ValueError(f"global_setup is C++ only, got `{global_setup}`. Most likely "
                             "this code can simply be moved to `setup`.")
        stmt, setup = (_clean(s) if isinstance(s, str) else s for s in (stmt, setup))
        g = dict(globals or {})
        if "torch" not in g:
            import ember
            g["torch"] = ember
        # (CopyIfCallgrind globals: their values here, the wrappers for collect_callgrind)
        self._timer = timeit.Timer(stmt=stmt, setup=setup, timer=timer,
                                   globals=CopyIfCallgrind.unwrap_all(g))
        self._globals, self._stmt = g, stmt
        self._task_spec = TaskSpec(_name(stmt), _name(setup), "", label, sub_label,
                                   description, env, num_threads)

    def _timeit(self, number):
        return max(self._timer.timeit(number), 1e-9)

    def timeit(self, number=1000000):
        """Run ``stmt`` ``number`` times (after a warm-up of number/100) as one measurement."""
        with _Threads(self._task_spec.num_threads):
            self._timeit(max(number // 100, 2))
            return Measurement(number, [self._timeit(number)], self._task_spec)

    def collect_callgrind(self, number=100, *, repeats=None, collect_baseline=True,
                          retain_out_file=False):
        """Count the instructions ``stmt`` runs ``number`` times, under valgrind's callgrind in
        a new process (globals must be wrapped in ``CopyIfCallgrind``); with a baseline (an
        empty statement) to tell the loop's own instructions. ``repeats`` measurements give
        a tuple. Needs ``valgrind``, ``callgrind_control`` and ``callgrind_annotate``."""
        from ._callgrind import collect
        if not isinstance(self._stmt, str):
            raise ValueError("`collect_callgrind` currently only supports string `stmt`")
        if repeats is not None and repeats < 1:
            raise ValueError("If specified, `repeats` must be >= 1")
        self._timeit(1)     # a faulty stmt or setup fails here, not in the valgrind process
        res = collect(self._task_spec, self._globals, number, repeats or 1, collect_baseline,
                      retain_out_file)
        return res[0] if repeats is None else res

    def repeat(self, repeat=-1, number=-1):
        raise NotImplementedError("See `Timer.blocked_autorange.`")

    def autorange(self, callback=None):
        raise NotImplementedError("See `Timer.blocked_autorange.`")

    def _block_size(self, min_run_time):
        """Executions per block so the clock's overhead is negligible (also a warm-up)."""
        overhead = float(np.median([self._timeit(0) for _ in range(5)]))
        number = 1
        while True:
            took = self._timeit(number)
            if (overhead / took <= 1e-4 and took >= min_run_time / 1000) or \
                    took > min_run_time or number * 10 > 2147483647:
                return number
            number *= 10

    def _loop(self, number, stop, min_run_time, max_run_time=None, callback=None):
        total, times = 0.0, []
        while True:
            t = self._timeit(number)
            times.append(t)
            total += t
            if callback:
                callback(number, t)
            if (total >= min_run_time and stop(times)) or (max_run_time and total > max_run_time):
                return times

    def blocked_autorange(self, callback=None, min_run_time=0.2):
        """Blocks of ``stmt`` (sized so the clock costs < 0.01%) until ``min_run_time``
        seconds are spent; one time per block."""
        with _Threads(self._task_spec.num_threads):
            number = self._block_size(min_run_time)
            times = self._loop(number, lambda ts: True, min_run_time, callback=callback)
        return Measurement(number, times, self._task_spec)

    def adaptive_autorange(self, threshold=0.1, *, min_run_time=0.01, max_run_time=10.0,
                           callback=None):
        """Like :meth:`blocked_autorange`, until IQR/median < ``threshold`` (with at least 4
        blocks) or ``max_run_time`` seconds."""
        with _Threads(self._task_spec.num_threads):
            number = self._block_size(0.05)

            def stop(times):
                return len(times) > 3 and \
                    Measurement(number, times, self._task_spec).meets_confidence(threshold)
            times = self._loop(number, stop, min_run_time, max_run_time, callback)
        return Measurement(number, times, self._task_spec)


def _clean(code):
    code = textwrap.dedent(code)
    return (code[1:] if code.startswith("\n") else code).rstrip()


def _name(code):
    return code if isinstance(code, str) else getattr(code, "__qualname__", repr(code))
