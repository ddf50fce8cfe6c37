"""Callgrind instruction counts (``torch.utils.benchmark``'s ``FunctionCount``,
``FunctionCounts``, ``CallgrindStats``) and ``CopyIfCallgrind``, the wrapper that lets a
global cross into the process ``Timer.collect_callgrind`` runs under valgrind."""
import collections
import dataclasses
import enum
import itertools
import operator
import re
import textwrap
from typing import NamedTuple

__all__ = ["FunctionCount", "FunctionCounts", "CallgrindStats", "CopyIfCallgrind"]


class FunctionCount(NamedTuple):
    """One function's instruction count."""
    count: int
    function: str


@dataclasses.dataclass(repr=False, eq=False, frozen=True)
class FunctionCounts:
    """Callgrind counts per function, highest first: a tuple of ``FunctionCount`` that adds
    and subtracts (to diff two runs), scales, ``filter``s and ``transform``s by function name,
    and ``denoise``s (drops CPython's noisy dict lookups).

    Example:
        >>> from ember.utils.benchmark import FunctionCount, FunctionCounts
        >>> a = FunctionCounts((FunctionCount(30, "f"), FunctionCount(5, "g")), inclusive=False)
        >>> b = FunctionCounts((FunctionCount(10, "f"),), inclusive=False)
        >>> list(a - b), (a - b).sum()
        ([FunctionCount(count=20, function='f'), FunctionCount(count=5, function='g')], 25)
    """

    _data: tuple
    inclusive: bool
    truncate_rows: bool = True
    _linewidth: int = None

    def __iter__(self):
        yield from self._data

    def __len__(self):
        return len(self._data)

    def __getitem__(self, item):
        # NOTE: torch tests ``isinstance(data, tuple)``, which a FunctionCount passes too, so
        # its ``counts[0]`` is a broken FunctionCounts; here an index gives the FunctionCount
        data = self._data[item]
        return FunctionCounts(data, self.inclusive, truncate_rows=False) \
            if isinstance(item, slice) else data

    def __repr__(self):
        from ..._tensor_str import PRINT_OPTS
        count_len = max((len(str(c)) + int(c < 0) for c, _ in self), default=0)
        fn_len = max((self._linewidth or PRINT_OPTS.linewidth) - count_len - 4, 40)
        lines = []
        for c, fn in self:
            if len(fn) > fn_len:
                left = int((fn_len - 5) // 2)
                fn = fn[:left] + " ... " + fn[-(fn_len - left - 5):]
            lines.append(f"  {c:>{count_len}}  {fn}")
        if self.truncate_rows and len(lines) > 18:
            lines = lines[:9] + ["...".rjust(count_len + 2)] + lines[-9:]
        if not self.inclusive:
            lines.extend(["", f"Total: {self.sum()}"])
        return "\n".join([object.__repr__(self)] + lines)

    def __add__(self, other):
        return self._merge(other, lambda c: c)

    def __sub__(self, other):
        return self._merge(other, operator.neg)

    def __mul__(self, other):
        return self._from_dict({fn: int(c * other) for c, fn in self._data}, self.inclusive)

    def transform(self, map_fn):
        """Counts with ``map_fn`` applied to each function name (equal names add up)."""
        counts = collections.defaultdict(int)
        for c, fn in self._data:
            counts[map_fn(fn)] += c
        return self._from_dict(counts, self.inclusive)

    def filter(self, filter_fn):
        """The counts whose function name ``filter_fn`` accepts."""
        return FunctionCounts(tuple(i for i in self if filter_fn(i.function)), self.inclusive)

    def sum(self):
        return sum(c for c, _ in self)

    def denoise(self):
        """Without CPython's unicode dict lookups (noisy from run to run)."""
        return self.filter(lambda fn: "dictobject.c:lookdict_unicode" not in fn)

    def _merge(self, second, merge_fn):
        if self.inclusive != second.inclusive:
            raise AssertionError("Cannot merge inclusive and exclusive counts.")
        counts = collections.defaultdict(int)
        for c, fn in self:
            counts[fn] += c
        for c, fn in second:
            counts[fn] += merge_fn(c)
        return self._from_dict(counts, self.inclusive)

    @staticmethod
    def _from_dict(counts, inclusive):
        return FunctionCounts(tuple(sorted((FunctionCount(c, fn) for fn, c in counts.items()
                                            if c), reverse=True)), inclusive)


@dataclasses.dataclass(repr=False, eq=False, frozen=True)
class CallgrindStats:
    """What ``Timer.collect_callgrind`` measured: the statement's and an empty statement's
    (baseline) instruction counts, inclusive and exclusive of callees."""

    task_spec: object
    number_per_run: int
    built_with_debug_symbols: bool
    baseline_inclusive_stats: FunctionCounts
    baseline_exclusive_stats: FunctionCounts
    stmt_inclusive_stats: FunctionCounts
    stmt_exclusive_stats: FunctionCounts
    stmt_callgrind_out: str = None

    def __repr__(self):
        base = self.baseline_exclusive_stats
        threads = self.task_spec.num_threads
        out = f"""
{object.__repr__(self)}
{self.task_spec.summarize()}
  {'':>25}All{'':>10}Noisy symbols removed
    Instructions: {self.counts(denoise=False):>12}{'':>15}{self.counts(denoise=True):>12}
    Baseline:     {base.sum():>12}{'':>15}{base.denoise().sum():>12}
{self.number_per_run} runs per measurement, {threads} thread{'s' if threads > 1 else ''}
""".strip()
        if not self.built_with_debug_symbols:
            out += textwrap.dedent("""
            Warning: PyTorch was not built with debug symbols.
                     Source information may be limited. Rebuild with
                     REL_WITH_DEB_INFO=1 for more detailed results.""")
        return out

    def stats(self, inclusive=False):
        """The statement's counts per function (``inclusive``: with callees')."""
        return self.stmt_inclusive_stats if inclusive else self.stmt_exclusive_stats

    def counts(self, *, denoise=False):
        """The statement's total instruction count."""
        stats = self.stmt_exclusive_stats
        return (stats.denoise() if denoise else stats).sum()

    def delta(self, other, inclusive=False):
        """This measurement's counts minus ``other``'s, per function."""
        return self.stats(inclusive=inclusive) - other.stats(inclusive=inclusive)

    def as_standardized(self):
        """The same counts with build-path and library-name prefixes stripped from function
        names, so that runs of different builds diff cleanly."""
        def strip(stats):
            for before, after in ((r"^.+build/\.\./", "build/../"),
                                  (r"^.+/" + re.escape("build/aten/"), "build/aten/"),
                                  (r"^.+/" + re.escape("Python/"), "Python/"),
                                  (r"^.+/" + re.escape("Objects/"), "Objects/"),
                                  (r"\s\[.+\]$", "")):
                stats = stats.transform(lambda fn: re.sub(before, after, fn))
            return stats
        return CallgrindStats(self.task_spec, self.number_per_run, self.built_with_debug_symbols,
                              strip(self.baseline_inclusive_stats),
                              strip(self.baseline_exclusive_stats),
                              strip(self.stmt_inclusive_stats),
                              strip(self.stmt_exclusive_stats), None)


class CopyIfCallgrind:
    """Marks a global of ``Timer.collect_callgrind`` that may be replaced in the valgrind
    process by a copy (pickled; an ``nn.Module`` saved with ``ember.save``); ``setup`` is
    code run there before it is used. Other globals are refused there.

    Example:
        >>> from ember.utils.benchmark import CopyIfCallgrind
        >>> CopyIfCallgrind(3).value
        3
    """

    def __init__(self, value, *, setup=None):
        for method, types in _allowed().items():
            if isinstance(value, types):
                self._value, self._setup, self._serialization = value, setup, method
                break
        else:
            names = "\n".join(getattr(t, "__name__", repr(t))
                              for t in itertools.chain(*_allowed().values()))
            raise ValueError(f"Unsupported type: {type(value)}\n`collect_callgrind` restricts "
                             f"globals to the following types:\n{textwrap.indent(names, '  ')}")

    value = property(lambda self: self._value)
    setup = property(lambda self: self._setup)
    serialization = property(lambda self: self._serialization)

    @staticmethod
    def unwrap_all(globals):
        return {k: v.value if isinstance(v, CopyIfCallgrind) else v for k, v in globals.items()}


class Serialization(enum.Enum):
    """How a ``CopyIfCallgrind`` global crosses (ember has no TorchScript: no TORCH_JIT)."""
    PICKLE = 0
    TORCH = 1
    TORCH_JIT = 2


def _allowed():
    """The kinds of global each serialization takes: builtins pickled, modules saved."""
    from ...nn import Module
    return {Serialization.PICKLE: (str, bytes, bool, int, float, complex),
            Serialization.TORCH: (Module,)}


# The process valgrind runs: setup, a warm-up, then per measurement: counters zeroed,
# the statement run ``number`` times, counters dumped (callgrind_control, spawned with as few
# instructions of ours as possible: the baseline, an empty statement, holds the same).
_SCRIPT = """
import os, pickle, shutil, sys
sys.path[:0] = {path!r}
import ember
import ember as torch
ember.set_num_threads({threads})
{load}
{setup}
_code = compile({loop!r}, "<stmt>", "exec")
_base = compile({base!r}, "<stmt>", "exec")
for _ in range({warmup}):
    exec({stmt!r})
_ctl, _pid, _env = shutil.which("callgrind_control"), str(os.getpid()), dict(os.environ)
_acts = [(os.POSIX_SPAWN_DUP2, os.open(os.devnull, os.O_WRONLY), 1)]
def _control(flag):
    os.waitpid(os.posix_spawn(_ctl, [_ctl, flag, _pid], _env, file_actions=_acts), 0)
_control("--instr=on")
for _c in [_code] * {repeats} + ([_base] if {baseline} else []):
    _control("--zero")
    exec(_c)
    _control("--dump")
"""


def _missing():
    import shutil
    return [c for c in ("valgrind", "callgrind_control", "callgrind_annotate")
            if shutil.which(c) is None]


def _loop(stmt, number):
    """``stmt`` ``number`` times, unrolled by blocks of 100 (a Python loop's own
    instructions would dwarf a small statement's), as torch's."""
    import textwrap
    loops = number // 100
    loops = 0 if loops == 1 else loops
    rest, out = number - 100 * loops, ""
    if loops:
        out += f"for _ in range({loops}):\n" + textwrap.indent("\n".join([stmt] * 100), "    ")
        out += "\n"
    return out + "\n".join([stmt] * rest)


def _parse(text, inclusive):
    """FunctionCounts from callgrind_annotate's output (torch's parser)."""
    total, rows, state = None, [], 0
    for line in text.splitlines():
        if state == 0:
            m = re.match(r"^([0-9,]+)\s+PROGRAM TOTALS", line)
            if m:
                total, state = int(m.group(1).replace(",", "")), 1
        elif state == 1:
            state = 2 if re.match(r"Ir\s+file:function", line) else 1
        else:
            m = re.match(r"^\s*([0-9,]+)\s+(.+:.+)$", line)
            if m:
                ir = int(m.group(1).replace(",", ""))
                if ir != total:     # (top-level red herrings of a multi-dump run)
                    rows.append(FunctionCount(ir, m.group(2)))
            elif not re.match(r"-+", line):
                break
    if state != 2:
        raise AssertionError("Failed to parse callgrind_annotate output")
    return FunctionCounts(tuple(sorted(rows, reverse=True)), inclusive=inclusive)


def collect(task_spec, globals, number, repeats, collect_baseline, retain_out_file):
    """``Timer.collect_callgrind``'s work: a tuple of ``repeats`` CallgrindStats."""
    import os
    import pickle
    import shutil
    import subprocess
    import sys
    import tempfile
    import ember
    if not sys.platform.startswith("linux"):
        raise OSError("Valgrind is not supported on this platform.")
    missing = _missing()
    if missing:
        raise OSError("Missing: " + ", ".join(missing))
    if globals.get("torch", ember) is not ember:
        raise ValueError("`collect_callgrind` does not support mocking out `torch`.")
    work = tempfile.mkdtemp(prefix="callgrind")
    try:
        load = []
        for name, v in globals.items():
            if name in ("torch", "__builtins__"):
                continue
            if not isinstance(v, CopyIfCallgrind):
                raise ValueError("`collect_callgrind` requires that globals be wrapped in "
                                 "`CopyIfCallgrind` so that serialization is explicit.")
            if v.setup is not None:
                load.append(textwrap.dedent(v.setup))
            pickled = v.serialization is Serialization.PICKLE
            path = os.path.join(work, name + (".pkl" if pickled else ".pt"))
            if pickled:
                with open(path, "wb") as f:
                    pickle.dump(v.value, f)
                load.append(f"with open({path!r}, 'rb') as f:\n    {name} = pickle.load(f)")
            else:
                ember.save(v.value, path)
                load.append(f"{name} = ember.load({path!r}, weights_only=False)")
        root = os.path.dirname(os.path.dirname(ember.__file__))
        script, out = os.path.join(work, "timer_callgrind.py"), os.path.join(work, "callgrind.out")
        with open(script, "w") as f:
            f.write(_SCRIPT.format(path=[root], threads=task_spec.num_threads,
                                   load="\n".join(load), setup=task_spec.setup,
                                   loop=_loop(task_spec.stmt, number), base=_loop("pass", number),
                                   warmup=min(number, 10), stmt=task_spec.stmt, repeats=repeats,
                                   baseline=bool(collect_baseline)))
        run = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                              "--dump-line=yes", "--dump-instr=yes", "--instr-atstart=no",
                              sys.executable, script], capture_output=True, text=True)
        if run.returncode:
            raise OSError(f"Failed to collect callgrind profile:\n{run.stderr[-4000:]}")

        def read(i):
            if i == repeats and not collect_baseline:
                return FunctionCounts((), inclusive=True), FunctionCounts((), inclusive=False), None
            path = f"{out}.{i + 1}"
            text = open(path).read() if retain_out_file else None
            return tuple(_parse(subprocess.run(
                ["callgrind_annotate", f"--inclusive={'yes' if inc else 'no'}", "--threshold=100",
                 "--show-percs=no", path], capture_output=True, text=True, check=True).stdout, inc)
                for inc in (True, False)) + (text,)
        results = [read(i) for i in range(repeats + 1)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = results[-1]
    # NOTE: ember is not torch's C++ build: "built with debug symbols" is False, as torch's
    # release builds say
    return tuple(CallgrindStats(task_spec, number, False, base[0], base[1], inc, exc, text)
                 for inc, exc, text in results[:-1])
