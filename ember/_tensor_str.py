"""``repr(tensor)`` in torch's format."""
import numpy as np

from . import _dtype

_DEFAULT_SHOWN = ("float32", "int64", "bool", "complex64")


class _Opts:
    precision, threshold, edgeitems, linewidth, sci_mode = 4, 1000, 3, 80, None


PRINT_OPTS = _Opts()


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None,
                     profile=None, sci_mode=None):
    """Like ``torch.set_printoptions``."""
    if profile == "default":
        PRINT_OPTS.precision, PRINT_OPTS.threshold, PRINT_OPTS.edgeitems = 4, 1000, 3
        PRINT_OPTS.linewidth = 80
    elif profile == "short":
        PRINT_OPTS.precision, PRINT_OPTS.threshold, PRINT_OPTS.edgeitems = 2, 1000, 2
    elif profile == "full":
        PRINT_OPTS.precision, PRINT_OPTS.threshold, PRINT_OPTS.edgeitems = 4, float("inf"), 3
    for k, v in dict(precision=precision, threshold=threshold, edgeitems=edgeitems,
                     linewidth=linewidth).items():
        if v is not None:
            setattr(PRINT_OPTS, k, v)
    PRINT_OPTS.sci_mode = sci_mode


def _formatter(vals, dt):
    """A function formatting one element, all elements to the same width (torch's rules)."""
    p = PRINT_OPTS.precision
    if dt.category == _dtype._BOOL:
        return lambda v: str(bool(v)), 5
    if dt.category == _dtype._INT:
        w = max((len(str(int(v))) for v in vals), default=1)
        return (lambda v: str(int(v)).rjust(w)), w
    finite = vals[np.isfinite(vals)]
    nz = np.abs(finite[finite != 0])
    ints = finite.size == 0 or bool(np.all(finite == np.ceil(finite)))
    if ints:
        if nz.size and nz.max() > 1e8 and PRINT_OPTS.sci_mode is not False:
            fmt = lambda v: f"{v:.{p}e}"  # noqa: E731
        else:
            fmt = lambda v: (f"{v:.0f}." if np.isfinite(v) else str(v))  # noqa: E731
    else:
        sci = PRINT_OPTS.sci_mode
        if sci is None:
            sci = bool(nz.size) and (nz.max() / nz.min() > 1000.0 or nz.max() > 1e8 or
                                     nz.min() < 1e-4)
        fmt = (lambda v: f"{v:.{p}e}") if sci else (lambda v: f"{v:.{p}f}")
    w = max((len(fmt(v)) for v in vals), default=1)
    return (lambda v: fmt(v).rjust(w) if np.isfinite(v) else
            ("nan" if np.isnan(v) else ("inf" if v > 0 else "-inf")).rjust(w)), w


def _fmt_array(a, dt, indent, summarize):
    if dt.category == _dtype._COMPLEX:
        re_f, _ = _formatter(a.real.reshape(-1), _dtype.float64)
        im_f, _ = _formatter(np.abs(a.imag.reshape(-1)), _dtype.float64)
        one = lambda v: f"{re_f(v.real)}{'+' if v.imag >= 0 else '-'}{im_f(abs(v.imag)).strip()}j"  # noqa
    else:
        flat = a.reshape(-1).astype(np.float64) if dt.category >= _dtype._FLOAT else a.reshape(-1)
        one, _ = _formatter(_summary_values(a, summarize).astype(np.float64)
                            if dt.category >= _dtype._FLOAT else flat, dt)

    def rec(x, ind):
        if x.ndim == 0:
            return one(x.item() if dt.category != _dtype._FLOAT else float(x))
        n, e = x.shape[0], PRINT_OPTS.edgeitems
        idx = list(range(n)) if not summarize or n <= 2 * e else \
            list(range(e)) + [None] + list(range(n - e, n))
        if x.ndim == 1:
            items = ["..." if i is None else rec(x[i], ind + 1) for i in idx]
            lines, cur = [], ""
            for it in items:
                piece = it + ", "
                if cur and len(cur) + len(piece) + ind > PRINT_OPTS.linewidth:
                    lines.append(cur.rstrip())
                    cur = ""
                cur += piece
            lines.append(cur[:-2])
            return "[" + ("\n" + " " * (ind + 1)).join(lines) + "]"
        sep = "," + "\n" * (x.ndim - 1) + " " * (ind + 1)
        return "[" + sep.join("..." if i is None else rec(x[i], ind + 1) for i in idx) + "]"
    return rec(a, indent)


def _summary_values(a, summarize):
    if not summarize:
        return a.reshape(-1)
    e = PRINT_OPTS.edgeitems
    parts = [a]
    for d in range(a.ndim):
        if a.shape[d] > 2 * e:
            parts = [np.concatenate([np.take(p, range(e), d), np.take(p, range(-e, 0), d)], d)
                     for p in parts]
    return parts[0].reshape(-1)


def tensor_repr(t, prefix="tensor("):
    dt = t.dtype
    extra = []
    if t.device.type != "cpu":
        extra.append(f"device='{t.device}'")
    if t.device.type == "meta":
        body = "..."
        extra.append(f"size={tuple(t.shape)}")
    else:
        a = t._data if t.device.type == "cpu" else np.asarray(t._data.get())
        if dt in (_dtype.bfloat16, _dtype.float8_e4m3fn, _dtype.float8_e5m2, _dtype.float16):
            a = a.astype(np.float32)
        summarize = a.size > PRINT_OPTS.threshold
        body = _fmt_array(a, dt, len(prefix), summarize) if a.size or a.ndim == 0 else "[]"
        if a.size == 0 and a.ndim != 1:
            extra.append(f"size={tuple(t.shape)}")
    if dt.name not in _DEFAULT_SHOWN or (dt.category == _dtype._FLOAT and
                                         dt is not _dtype.get_default_dtype()) \
            or (dt is _dtype.float32 and _dtype.get_default_dtype() is not _dtype.float32):
        if not (dt is _dtype.get_default_dtype()):
            extra.append(f"dtype={dt!r}")
    if t.grad_fn is not None:
        extra.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t._requires_grad:
        extra.append("requires_grad=True")
    return prefix + body + "".join(", " + e for e in extra) + ")"
