"""``Compare``: many Measurements as one table per label, rows by thread count and sub-label
(or statement), columns by description, printed as torch.utils.benchmark prints them."""
import enum
import math

from ._timer import Measurement, select_unit, trim_sigfig

BEST, GOOD, BAD, VERY_BAD = "\033[92m", "\033[34m", "\033[2m\033[91m", "\033[31m"
BOLD, TERMINATE = "\033[1m", "\033[0m"
_UNIT_NAMES = {"ns": "nanosecond", "us": "microsecond", "ms": "millisecond", "s": "second"}


class Colorize(enum.Enum):
    NONE = "none"
    COLUMNWISE = "columnwise"
    ROWWISE = "rowwise"


def _color(text, value, best):
    if value <= best * 1.01 or value <= best + 100e-9:
        return BEST + BOLD + text + TERMINATE * 2
    if value <= best * 1.1:
        return GOOD + BOLD + text + TERMINATE * 2
    if value >= best * 5:
        return VERY_BAD + BOLD + text + TERMINATE * 2
    return BAD + text + TERMINATE * 2 if value >= best * 2 else text


class Compare:
    """Print many Measurements as tables (see
    https://pytorch.org/tutorials/recipes/recipes/benchmark.html).

    Args:
        results (list[Measurement]): the measurements; ``label`` picks the table,
            ``num_threads`` and ``sub_label`` the row, ``description`` the column.

    Example:
        >>> from ember.utils.benchmark import Compare, Measurement, TaskSpec
        >>> ms = [Measurement(1, [t * 1e-6] * 4, TaskSpec("f()", "pass", label="op",
        ...       sub_label="n=1", description=d)) for t, d in ((1.0, "ember"), (2.0, "numpy"))]
        >>> print(Compare(ms))
        [------------ op -----------]
                   |  ember  |  numpy
        1 threads: ------------------
              n=1  |   1.0   |   2.0
        <BLANKLINE>
        Times are in microseconds (us).
        <BLANKLINE>
    """

    def __init__(self, results):
        self._results = []
        self.extend_results(results)
        self._trim, self._colorize, self._highlight = False, Colorize.NONE, False

    def extend_results(self, results):
        """Add more Measurements."""
        for r in results:
            if not isinstance(r, Measurement):
                raise ValueError(f"Expected an instance of `Measurement`, got {type(r)} instead.")
        self._results.extend(results)

    def trim_significant_figures(self):
        """Print only the digits each measurement's spread supports."""
        self._trim = True

    def colorize(self, rowwise=False):
        """Color cells by how far they are from the best in their column (or row)."""
        self._colorize = Colorize.ROWWISE if rowwise else Colorize.COLUMNWISE

    def highlight_warnings(self):
        """Mark cells whose IQR is large relative to their median."""
        self._highlight = True

    def print(self):
        print(str(self))

    def __str__(self):
        groups = {}
        for m in Measurement.merge(self._results):
            groups.setdefault(m.label, []).append(m)
        return "\n".join(self._render(ms) for ms in groups.values())

    def _render(self, results):
        unit, scale = select_unit(min(m.median for m in results))
        rows = list(dict.fromkeys((m.num_threads, m.env, m.as_row_name) for m in results))
        rows.sort(key=lambda k: k[:2])                     # stable: statement order kept
        cols = list(dict.fromkeys(m.description for m in results))
        cell = {((m.num_threads, m.env, m.as_row_name), m.description): m for m in results}
        envs = {m.env for m in results}
        show_env = len(envs) > 1
        env_w = max(map(len, envs)) if show_env else 0
        fmts = {c: self._template([m for m in results if m.description == c], scale) for c in cols}

        def number(m, c):
            template, highlight = fmts[c]
            if m is None:
                return " " * len(template.format(1, ""))
            v = m.median / scale
            if self._trim:
                v = trim_sigfig(v, m.significant_figures)
            spread = f" (! {m.iqr / m.median * 100:.0f}%)" if highlight and m.has_warnings else ""
            return template.format(v, spread)

        text = [[""] + [c or "" for c in cols]]
        prev_env = None
        for key in rows:
            env = f"({key[1]})" if show_env and key[1] != prev_env else ""
            prev_env = key[1]
            text.append(["  " + env.ljust(env_w + 4) + key[2]] +
                        [number(cell.get((key, c)), c) for c in cols])
        widths = [max(len(r[i]) for r in text) for i in range(len(cols) + 1)]
        head = "  |  ".join(s.center(w) for s, w in zip(text[0], widths))
        out, prev_threads = [head], None
        for key, row in zip(rows, text[1:]):
            if key[0] != prev_threads:
                prev_threads = key[0]
                out.append(f"{key[0]} threads: ".ljust(len(head), "-"))
            out.append("  |  ".join(self._paint(row, widths, key, cols, cell)))
        label = results[0].label or ""
        lines = [f"[{(' ' + label + ' ').center(len(head) - 2, '-')}]", *out, "",
                 f"Times are in {_UNIT_NAMES[unit]}s ({unit})."]
        if self._highlight and any(m.has_warnings for m in results):
            lines.append("(! XX%) Measurement has high variance, where XX is the IQR / median "
                         "* 100.")
        return "\n".join(lines) + "\n"

    def _template(self, column, scale):
        """A column's number format (as wide as its largest integer part, with the decimals
        its least precise entry supports) and whether it flags high-variance cells."""
        highlight = self._highlight and any(m.has_warnings for m in column)
        lead = [math.ceil(math.log10(m.median / scale)) for m in column]
        decimals = 1
        if self._trim:
            decimals = min(max(m.significant_figures - d, 0) for d, m in zip(lead, column))
        width = max(lead) + decimals + (1 if decimals else 0)
        return f"{{:>{width}.{decimals}f}}{{:>{7 if highlight else 0}}}", highlight

    def _paint(self, row, widths, key, cols, cell):
        out = [row[0].ljust(widths[0])]
        ms = [cell.get((key, c)) for c in cols]
        for text, w, m, c in zip(row[1:], widths[1:], ms, cols):
            text = text.center(w)
            if self._colorize is not Colorize.NONE and m is not None:
                if self._colorize is Colorize.ROWWISE:
                    best = min(x.median for x in ms if x is not None)
                else:
                    best = min(x.median for (k, d), x in cell.items() if d == c and k[0] == key[0])
                text = _color(text, m.median, best)
            out.append(text)
        return out
